package redistest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Proxy is a loopback TCP proxy in front of a Redis server that can lose a
// reply: the command ran on the server, its client never hears of it (the
// connection drops, as when a network path or a failing node closes it
// after the write was applied). go-redis then sends the command again on a
// new connection (it retries after EOF): what a store runs must be safe to
// run twice in a row. It can also cut a pub/sub connection as a message
// comes (CutOnPush).
type Proxy struct {
	t      testing.TB
	target string
	ln     net.Listener

	mu    sync.Mutex
	arm   []armed  // the requests that lose their replies
	cut   [][]byte // CutOnPush patterns
	conns map[net.Conn]struct{}
	lost  chan struct{}
	nlost atomic.Int64
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to target (host:port) on a free loopback port;
// it stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{t: t, target: target, ln: ln, conns: map[net.Conn]struct{}{}, lost: make(chan struct{}, 64)}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address, for the client.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// LoseReply arms the proxy: the next request that holds any of patterns (a
// script's SHA1, a command's name as RESP writes it, a key; "" matches
// nothing) goes to the server, and once the server has answered (it has
// run the request then) the client's connection is closed instead of the
// reply being passed on. One request per call loses its reply.
func (p *Proxy) LoseReply(patterns ...string) {
	p.LoseReplyAfter(0, patterns...)
}

// LoseReplyAfter is LoseReply of the request after skip more requests
// that hold a pattern have gone through (with their replies).
func (p *Proxy) LoseReplyAfter(skip int, patterns ...string) {
	a := armed{skip: skip}
	for _, pat := range patterns {
		if pat != "" {
			a.patterns = append(a.patterns, []byte(pat))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arm = append(p.arm, a)
}

// CutOnPush arms the proxy for a message the server sends unasked (a
// pub/sub message): the next data from the server that holds pattern is
// not passed on and its connection is closed, as a network path that
// breaks while Redis delivers it (the subscriber reconnects and
// subscribes again, and never hears that message).
func (p *Proxy) CutOnPush(pattern string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = append(p.cut, []byte(pattern))
}

// takeCut reports whether data from the server holds an armed CutOnPush
// pattern, disarming it.
func (p *Proxy) takeCut(data []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pat := range p.cut {
		if bytes.Contains(data, pat) {
			p.cut = slices.Delete(p.cut, i, i+1)
			return true
		}
	}
	return false
}

// armed is one request to lose the reply of.
type armed struct {
	patterns [][]byte
	skip     int // matching requests to let through first
}

// LoseScriptReply loads script into the server (so that its client sends
// EVALSHA with its hash) and arms the proxy for it: LoseReply of its hash
// and of evalMarks (parts of its source, for a script its client sends as
// EVAL).
func (p *Proxy) LoseScriptReply(ctx context.Context, script *redis.Script, evalMarks ...string) {
	p.t.Helper()
	c := Client(p.t, p.target)
	if err := script.Load(ctx, c).Err(); err != nil {
		p.t.Fatalf("proxy: loading a script: %v", err)
	}
	_ = c.Close()
	p.LoseReply(append(evalMarks, script.Hash())...)
}

// WaitLost waits until a reply has been lost, or fails the test when ctx
// ends first or, called after the request's call returned, when the
// request never came through the proxy.
func (p *Proxy) WaitLost(ctx context.Context) {
	p.t.Helper()
	select {
	case <-p.lost:
		return
	default:
	}
	if p.Armed() != 0 {
		p.t.Fatal("proxy: the armed request never came through")
	}
	select {
	case <-p.lost:
	case <-ctx.Done():
		p.t.Fatalf("proxy: no reply was lost: %v", ctx.Err())
	}
}

// Armed is how many LoseReply calls are still waiting for their request.
func (p *Proxy) Armed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.arm)
}

// Disarm drops the LoseReply calls still waiting and says how many there
// were.
func (p *Proxy) Disarm() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.arm)
	p.arm = nil
	return n
}

// Lost is how many replies and pushed messages the proxy has lost.
func (p *Proxy) Lost() int { return int(p.nlost.Load()) }

// take reports whether req holds an armed pattern, disarming it.
func (p *Proxy) take(req []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.arm {
		a := &p.arm[i]
		if !slices.ContainsFunc(a.patterns, func(pat []byte) bool { return bytes.Contains(req, pat) }) {
			continue
		}
		if a.skip > 0 {
			a.skip--
			return false
		}
		p.arm = slices.Delete(p.arm, i, i+1)
		return true
	}
	return false
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track records c as open (false: the proxy is closing, c is closed).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// serve relays one client connection. A client sends one request (or one
// pipeline) and waits for its replies before it sends more, so the first
// read of the server's side after an armed request is that request's
// reply: Redis has run everything it read by then.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	var mu sync.Mutex
	drop := false // the next reply is lost
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				mu.Lock()
				lose := drop
				mu.Unlock()
				if lose || p.takeCut(buf[:n]) {
					_ = client.Close()
					_ = server.Close()
					p.nlost.Add(1)
					select {
					case p.lost <- struct{}{}:
					default:
					}
					return
				}
				if _, werr := client.Write(buf[:n]); werr != nil {
					_ = server.Close()
					return
				}
			}
			if err != nil {
				_ = client.Close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if p.take(buf[:n]) {
				mu.Lock()
				drop = true
				mu.Unlock()
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = client.Close()
			}
			break
		}
	}
	_ = server.Close()
	<-done
	_ = client.Close()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}
