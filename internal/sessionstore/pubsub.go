package sessionstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/session"
)

type handlerFunc = func(ctx context.Context, c session.Control) session.Reply

// follower is the registration of a Follow call.
type follower struct {
	notify func(removed bool)
}

// envelope is a message on a control channel: a request (Control set) or
// a reply (Reply set) to the request with the same ID.
type envelope struct {
	ID      string           `json:"id"`
	From    string           `json:"from,omitempty"`
	Control *session.Control `json:"control,omitempty"`
	Reply   *session.Reply   `json:"reply,omitempty"`
}

// listen reads the pub/sub connection until Close.
func (r *Redis) listen(msgs <-chan any) {
	defer close(r.readerEnd)
	for msg := range msgs {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				r.confirmed(m.Channel)
			}
		case *redis.Message:
			if m.Channel == r.control {
				r.onControl(m.Payload)
			} else {
				r.onNotify(m.Channel, m.Payload)
			}
		}
	}
}

// confirmed releases the Follow calls waiting for channel's subscription.
func (r *Redis) confirmed(channel string) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	for c := range r.confirms[channel] {
		close(c)
	}
	delete(r.confirms, channel)
}

func (r *Redis) onNotify(channel, payload string) {
	if payload == r.id {
		return
	}
	r.pmu.Lock()
	f := r.follows[channel]
	removed := payload == deletedPayload
	if f != nil && removed {
		delete(r.follows, channel)
	}
	r.pmu.Unlock()
	// Outside the lock: a follower may call the store.
	if f != nil {
		f.notify(removed)
	}
}

// Follow implements session.Shared. It subscribes to the session's notify
// channel on the store's pub/sub connection and returns once Redis has
// confirmed the subscription, so that events stored after it returns are
// signalled; when Redis does not confirm within Options.Timeout it logs a
// warning and returns anyway (go-redis subscribes again once connected;
// followers poll as well). notify runs on the connection's reader, so it
// must not block. A second Follow of the same id replaces the first, which
// then hears nothing more. After Close nothing is heard.
func (r *Redis) Follow(id string, notify func(removed bool)) (stop func()) {
	channel := r.notifyChannel(id)
	f := &follower{notify: notify}
	select {
	case <-r.closed:
		return func() {}
	default:
	}
	confirm := make(chan struct{})
	ctx, cancel := context.WithTimeout(r.ctx, r.o.Timeout)
	defer cancel()

	r.subMu.Lock()
	r.pmu.Lock()
	r.follows[channel] = f
	if r.confirms[channel] == nil {
		r.confirms[channel] = map[chan struct{}]struct{}{}
	}
	r.confirms[channel][confirm] = struct{}{}
	r.pmu.Unlock()
	err := r.ps.Subscribe(ctx, channel)
	r.subMu.Unlock()

	if err == nil {
		select {
		case <-confirm:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		r.pmu.Lock()
		delete(r.confirms[channel], confirm)
		if len(r.confirms[channel]) == 0 {
			delete(r.confirms, channel)
		}
		r.pmu.Unlock()
		r.log.Warn("session store: subscription to a session's notifications not confirmed (go-redis retries on reconnect)",
			"session", id, "err", err)
	}

	var once sync.Once
	return func() {
		once.Do(func() {
			r.pmu.Lock()
			if r.follows[channel] == f {
				delete(r.follows, channel)
			}
			r.pmu.Unlock()
			r.unsubscribeIdle(channel)
		})
	}
}

// unsubscribeIdle unsubscribes from channel unless a follower registered
// for it meanwhile.
func (r *Redis) unsubscribeIdle(channel string) {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	r.pmu.Lock()
	_, busy := r.follows[channel]
	r.pmu.Unlock()
	if busy {
		return
	}
	select {
	case <-r.closed:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.o.Timeout)
	defer cancel()
	if err := r.ps.Unsubscribe(ctx, channel); err != nil {
		// go-redis has forgotten the channel already: a reconnection
		// does not subscribe to it again.
		r.log.Debug("session store: unsubscribe", "channel", channel, "err", err)
	}
}

// Serve implements session.Shared. Control messages that arrive before
// the first Serve are answered ReplyOther "replica not ready".
func (r *Redis) Serve(h func(ctx context.Context, c session.Control) session.Reply) {
	if h == nil {
		r.handler.Store(nil)
		return
	}
	r.handler.Store(&h)
}

// Call implements session.Shared. The control message is published on
// replica's control channel, and again every Options.Timeout until the
// reply comes on this replica's. When ctx has no deadline the wait is
// bounded by the handler's own bound (30s) plus Options.Timeout, or, when
// the channel had no subscriber, by twice Options.Timeout (then
// ErrNoReplica).
func (r *Redis) Call(ctx context.Context, replica string, c session.Control) (session.Reply, error) {
	select {
	case <-r.closed:
		return session.Reply{}, ErrClosed
	default:
	}
	reqID := randomHex(8)
	data, err := json.Marshal(envelope{ID: reqID, From: r.id, Control: &c})
	if err != nil {
		return session.Reply{}, fmt.Errorf("sessionstore: call %s: %w", replica, err)
	}
	wait := make(chan session.Reply, 1)
	r.pmu.Lock()
	r.calls[reqID] = wait
	r.pmu.Unlock()
	defer func() {
		r.pmu.Lock()
		delete(r.calls, reqID)
		r.pmu.Unlock()
	}()

	publish := func() (int64, error) {
		pctx, cancel := r.op(ctx)
		defer cancel()
		return r.c.Publish(pctx, r.controlChannel(replica), data).Result()
	}
	n, err := publish()
	if err != nil {
		return session.Reply{}, wrap("call "+replica, err)
	}
	// No receiver proves little: on a Redis Cluster PUBLISH counts only
	// the receiving node's subscribers, and a replica whose pub/sub
	// connection reconnects (a network blip, a Sentinel failover moving
	// every connection to the new master) is not subscribed for a moment.
	// The reply is waited for, briefly, the request sent again meanwhile.
	noReceiver := n == 0
	bound := handlerTimeout + r.o.Timeout
	if noReceiver {
		bound = 2 * r.o.Timeout
	}
	if dl, ok := ctx.Deadline(); !ok || noReceiver && time.Until(dl) > bound {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	// The request goes again every Options.Timeout until the reply
	// comes: a message published while a pub/sub connection reconnects
	// (this replica's, or the owner's) is never delivered. The owner
	// handles an id once and answers a repeat with the reply it sent.
	again := time.NewTicker(r.o.Timeout)
	defer again.Stop()
	for {
		select {
		case rep := <-wait:
			return rep, nil
		case <-again.C:
			_, _ = publish() // its error: the next tick, or the bound
		case <-ctx.Done():
			if noReceiver {
				return session.Reply{}, fmt.Errorf("sessionstore: call %s: %w", replica, session.ErrNoReplica)
			}
			return session.Reply{}, fmt.Errorf("sessionstore: call %s: no reply: %w", replica, ctx.Err())
		case <-r.closed:
			return session.Reply{}, ErrClosed
		}
	}
}

// onControl handles a message on this replica's control channel: a reply
// goes to its Call, a request to the handler in a goroutine of its own.
func (r *Redis) onControl(payload string) {
	var env envelope
	if err := json.Unmarshal([]byte(payload), &env); err != nil {
		r.log.Warn("session store: malformed control message", "err", err)
		return
	}
	switch {
	case env.Reply != nil:
		r.pmu.Lock()
		wait := r.calls[env.ID]
		delete(r.calls, env.ID)
		r.pmu.Unlock()
		if wait != nil {
			wait <- *env.Reply // cap 1, one reply per id
		}
	case env.Control != nil && env.From != "":
		if env.Control.Op == session.OpState {
			// A read: asked again, it is answered again.
			r.handlers.Add(1)
			go r.handle(env, "")
			return
		}
		key := env.From + "/" + env.ID
		first, reply := r.firstTime(key)
		switch {
		case first:
			r.handlers.Add(1)
			go r.handle(env, key)
		case reply != nil:
			// Asked again: the reply was lost on its way.
			r.handlers.Add(1)
			go func() {
				defer r.handlers.Done()
				r.sendReply(env, reply)
			}()
		}
	default:
		r.log.Warn("session store: control message without control or sender", "id", env.ID)
	}
}

// handledCall is a control message handled: when it came, and its reply
// once sent.
type handledCall struct {
	at    time.Time
	reply []byte
}

// firstTime reports whether the control message key (its sender and id)
// has not come within handledFor, or else the reply sent to it (nil while
// it is handled). A message comes twice when its caller asks again (its
// reply was lost) or when a PUBLISH is sent again after its own reply was
// lost: a second handling could answer the caller first (a tool result
// submitted twice is refused the second time).
func (r *Redis) firstTime(key string) (bool, []byte) {
	now := time.Now()
	r.pmu.Lock()
	defer r.pmu.Unlock()
	if h := r.handled[key]; h != nil {
		return false, h.reply
	}
	// The oldest go first (handledOrder is in arrival order).
	for len(r.handledOrder) > 0 {
		h := r.handled[r.handledOrder[0]]
		if h != nil && now.Sub(h.at) <= handledFor {
			break
		}
		delete(r.handled, r.handledOrder[0])
		r.handledOrder = r.handledOrder[1:]
	}
	r.handled[key] = &handledCall{at: now}
	r.handledOrder = append(r.handledOrder, key)
	return true, nil
}

// handle runs the handler on one control message (key: its sender and
// id, "" for a read) and publishes its reply to the sender's control
// channel, keeping it for a repeat of the message.
func (r *Redis) handle(env envelope, key string) {
	defer r.handlers.Done()
	rep := session.Reply{Err: session.ReplyOther, Msg: "replica not ready"}
	if h := r.handler.Load(); h != nil {
		rep = r.runHandler(*h, *env.Control)
	}
	data, err := json.Marshal(envelope{ID: env.ID, From: r.id, Reply: &rep})
	if err != nil {
		r.log.Error("session store: control reply not encodable", "op", env.Control.Op, "err", err)
		return
	}
	if key != "" {
		r.pmu.Lock()
		if h := r.handled[key]; h != nil {
			h.reply = data
		}
		r.pmu.Unlock()
	}
	r.sendReply(env, data)
}

// sendReply publishes a control reply to the sender of env.
func (r *Redis) sendReply(env envelope, data []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), r.o.Timeout)
	defer cancel()
	if err := r.c.Publish(ctx, r.controlChannel(env.From), data).Err(); err != nil {
		r.log.Warn("session store: control reply not sent", "to", env.From, "op", env.Control.Op, "err", err)
	}
}

func (r *Redis) runHandler(h handlerFunc, c session.Control) (rep session.Reply) {
	ctx, cancel := context.WithTimeout(r.ctx, handlerTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("session store: control handler panicked", "op", c.Op, "session", c.SessionID, "panic", p)
			rep = session.Reply{Err: session.ReplyOther, Msg: "internal error"}
		}
	}()
	return h(ctx, c)
}
