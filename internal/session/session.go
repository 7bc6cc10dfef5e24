package session

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/retry"
)

// Session statuses, as GetSession reports them.
const (
	StatusIdle      = "idle"
	StatusStreaming = "streaming"
	StatusRetrying  = "retrying"
)

// replication is what the session core asks of replication, which sits
// beside it (replicas.go, lease.go, mirror.go, control.go, takeover.go,
// fencing.go): the core calls it at these points only. Whatever the store
// (Redis shared by replicas, or this process's own MemoryStore), a prompt
// goes through all of them.
type replication interface {
	// begin takes s's lease for a prompt, with its run, its place among its
	// tenant's prompts and the user message, in one step of the store;
	// brings the working copy up to date; and subscribes to the prompt's
	// events. Nothing stays taken when it fails. s.mu is held.
	begin(ctx context.Context, s *Session, promptID string, user provider.Message) (*Subscription, error)
	// hold keeps the lease while the prompt runs; stop ends it. A lease
	// lost meanwhile fences the session (fencing.go).
	hold(s *Session, promptID string) (stop func())
	// schedule records the prompt's retry state in its stored run: a retry
	// due at r.Due, or out of backoff (r.Due zero); stripped is the history
	// index step 11 took off the runtime context (-1: none). s.mu is held.
	schedule(s *Session, r Run, stripped int64)
	// end writes the session back and marks the run as ending, before
	// prompt_end goes out (the tenant's count no longer has the prompt).
	// s.mu is held.
	end(ctx context.Context, s *Session, promptID, outcome, errText string)
	// release stores the prompt's last events and gives the lease back,
	// after prompt_end. s.mu is not held.
	release(ctx context.Context, s *Session, promptID string)
	// idle is told that s runs nothing here any more. s.mu is held.
	idle(s *Session)
	// owner is the replica running s's prompt when it is another one; ""
	// when it runs here or none runs.
	owner(ctx context.Context, s *Session) (string, error)
	// forward sends c to owner and maps its reply onto the session API's
	// errors.
	forward(ctx context.Context, s *Session, owner string, c Control) error
	// subscribe follows s's events after seq after, from whichever replica
	// runs its prompt.
	subscribe(ctx context.Context, s *Session, after uint64) (*Subscription, error)
}

// Session is one conversation. Its methods are safe for concurrent use.
type Session struct {
	m       *Manager
	id      string
	tenant  string
	created time.Time
	order   uint64
	role    string
	system  string
	tools   []provider.Tool
	primary string
	params  provider.Params // the session's model parameters
	log     *eventLog

	mu       sync.Mutex
	model    string // current provider/model
	settings retry.Settings
	context  []provider.Message // runtime context sent to the model
	entries  int                // persisted history length
	// histBytes is the persisted history's size by entrySize, as far as
	// this copy knows it: exact once it has loaded or written the
	// history (a prompt's start loads what it has not seen).
	histBytes int64
	deleted   bool

	// The history indexes of the context's messages,
	// the history length the context was built from (-1: never built
	// here), the newest stored seq seen, and how the log follows the
	// stored one while it has readers here (startMirror).
	ctxIndex   []int64
	ctxEntries int
	storedSeq  uint64
	following  bool       // notifications of the stored log are followed
	stopFollow func()     // ends that
	pulling    bool       // a pull goroutine runs
	pullAgain  bool       // a notification came while it ran
	lastPull   time.Time  // the copy was last brought up to date
	pullMu     sync.Mutex // serialises pulls from the stored log
	ending     bool       // prompt_end is out; the run is storing its last events
	handoff    bool       // the run stops, to be resumed by another replica
	fenced     bool       // the run's lease was lost: it stops without a word more (fencing.go)
	checking   bool       // the log waits for the store to tell its resume point (fencing.go)
	lastUsed   time.Time  // this replica's copy was last looked up (shared store)

	// The running prompt.
	running    bool
	promptID   string
	generation uint64 // bumped by abort: a continuation of an older generation is stale
	cancelRun  context.CancelFunc
	abortCause stop // what aborted the run
	runDone    chan struct{}
	streaming  bool // a model call is in flight

	// The running prompt's model parameters (the session's, or its own),
	// and thinkingOff: a provider refused thinking for the open tool loop
	// (stale reasoning, reasoning_order), whose calls go without thinking
	// until the loop ends.
	runParams   provider.Params
	thinkingOff bool
	// freeRetries are the retry chain's retries that max_retries does not
	// count (a stale-reasoning retry after the strip); reasoningRetried:
	// one was made since the last successful call.
	freeRetries      int
	reasoningRetried bool

	chain      chain // the retry chain's state (retryflow.go)
	credential provider.Credential
	// switchedTo is the sibling a usage limit switched to (step 7): the
	// store picked it in the same round trip that blocked the credential,
	// so the retry's call uses it without picking again. Or the prompt's
	// first credential, picked in the start's round trip. One call only.
	switchedTo pickedCred
	fallback   *activeFallback
	probe      heldProbe // the probe of a model this session's next call to it makes
	// ownKeys holds, by provider name, whether the session's last call to
	// it used a key of its tenant's own (its next call will, while that key
	// is available): the server's keys' cooldowns are not its concern then.
	ownKeys map[string]bool
	waiting *toolWait // the tool calls the run waits for

	// What the session's model calls spent (persisted with the record),
	// and what the running prompt's did, and of that what its retries
	// threw away (prompt_end).
	spent     Spend
	runSpent  Spend
	runWasted Spend
	// sticky is the credential the session used last, by provider name:
	// its next call to the provider keeps it while it is available.
	// warmModel and warmAccount are where the session's last call that
	// read a prompt went (provider/model and credential account): the
	// prompt cache it has.
	sticky map[string]string
	// paced: the credential, by provider, that pacing blocked after this
	// session's last call to it; the next call that avoids it is a 429
	// avoided (RateLimitObserver).
	paced       map[string]string
	warmModel   string
	warmAccount string

	// Tracing (trace.go): the trace context the running prompt's Prompt
	// call came with, and the prompt's span while it runs.
	runTrace trace.SpanContext
	span     atomic.Pointer[spanRef]
}

// ID is the session's identifier.
func (s *Session) ID() string { return s.id }

// State is a snapshot of a session.
type State struct {
	ID, Tenant, Model, PrimaryModel, Role, SystemPrompt string
	Status                                              string
	IsRetrying                                          bool
	RetryAttempt                                        int
	Retry                                               retry.Settings
	Tools                                               []provider.Tool
	Params                                              provider.Params
	Created                                             time.Time
	LastSeq                                             uint64
	MessageCount                                        int
	// PendingToolCalls are the tool calls the run waits for results of.
	PendingToolCalls []ToolCall
	// Usage is every model call's of the session, failed attempts included;
	// CostUSD their cost, nil when the catalog prices none of them.
	Usage   provider.Usage
	CostUSD *float64
}

// State returns a snapshot of the session.
func (s *Session) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{
		ID: s.id, Tenant: s.tenant, Model: s.model, PrimaryModel: s.primary, Role: s.role,
		SystemPrompt: s.system, IsRetrying: s.chain.open, RetryAttempt: s.chain.attempt,
		Retry: s.settings, Tools: s.tools, Params: s.params, Created: s.created, LastSeq: s.log.lastSeq(),
		MessageCount: s.entries, Status: StatusIdle, Usage: s.spent.Usage, CostUSD: s.spent.Cost(),
	}
	if w := s.waiting; w != nil {
		for _, p := range w.calls {
			if p.result == nil {
				st.PendingToolCalls = append(st.PendingToolCalls, p.call)
			}
		}
	}
	switch {
	case s.chain.open:
		st.Status = StatusRetrying
	case s.running && !s.ending:
		st.Status = StatusStreaming
	}
	return st
}

// Subscribe returns a reader of the session's events after seq after. With
// a shared store the events come from whichever replica runs the session.
func (s *Session) Subscribe(ctx context.Context, after uint64) (*Subscription, error) {
	return s.m.rep.subscribe(ctx, s, after)
}

// Subscribers is the number of readers following the session's events.
func (s *Session) Subscribers() int { return s.log.subscribers() }

// Messages returns up to limit entries of the persisted history from offset.
func (s *Session) Messages(ctx context.Context, offset, limit int) ([]Entry, int, error) {
	return s.m.store.List(ctx, s.id, offset, limit)
}

// SetAutoRetry writes the session's retry.enabled.
func (s *Session) SetAutoRetry(ctx context.Context, enabled bool) error {
	owner, err := s.m.rep.owner(ctx, s)
	if err != nil {
		return err
	}
	if owner != "" {
		// The owner writes its settings back when its prompt ends.
		return s.m.rep.forward(ctx, s, owner, Control{Op: OpSetAutoRetry, Enabled: enabled})
	}
	s.mu.Lock()
	s.settings.Enabled = enabled
	mu, running := s.mutableLocked(), s.running
	s.mu.Unlock()
	if running {
		return nil
	}
	if err := s.m.store.Save(ctx, s.id, mu); err != nil {
		return unavailable("save the session", err)
	}
	return nil
}

func (s *Session) setAutoRetry(enabled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settings.Enabled = enabled
}

// AbortRetry cancels the backoff sleep of a retry chain. On a session that
// is not retrying it is a no-op. Outside the sleep (a retried call is
// streaming) it ends the chain at that call's failure, if it fails.
func (s *Session) AbortRetry(ctx context.Context) error {
	if owner, err := s.m.rep.owner(ctx, s); err != nil || owner != "" {
		if err != nil {
			return err
		}
		return s.m.rep.forward(ctx, s, owner, Control{Op: OpAbortRetry})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abortRetryLocked(stopUser)
	return nil
}

// abortRetryLocked cancels the retry chain's backoff sleep, or ends the
// chain at the next failure; by is what cancels it (its final error).
func (s *Session) abortRetryLocked(by stop) {
	if s.chain.sleepCancel != nil {
		close(s.chain.sleepCancel)
		s.chain.sleepCancel = nil
		s.noteChainStopLocked(by)
		return
	}
	if s.chain.open {
		s.chain.aborted = true
		s.noteChainStopLocked(by)
	}
}

func (s *Session) noteChainStopLocked(by stop) {
	if s.chain.stop == stopNone {
		s.chain.stop = by
	}
}

// Abort cancels a pending retry first, then the running stream, and waits
// until the prompt has ended (or ctx is done). On an idle session it is a
// no-op.
func (s *Session) Abort(ctx context.Context) error {
	if owner, err := s.m.rep.owner(ctx, s); err != nil || owner != "" {
		if err != nil {
			return err
		}
		return s.m.rep.forward(ctx, s, owner, Control{Op: OpAbort, Cause: causeAborted})
	}
	return s.abort(ctx, stopUser)
}

func (s *Session) abort(ctx context.Context, cause stop) error {
	s.mu.Lock()
	done := s.abortLocked(cause)
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// abortLocked returns the channel closed when the running prompt ends (nil
// when none runs).
func (s *Session) abortLocked(cause stop) <-chan struct{} {
	if !s.running {
		return nil
	}
	s.abortRetryLocked(cause)
	s.generation++
	if s.abortCause == stopNone {
		s.abortCause = cause
	}
	s.cancelRun()
	return s.runDone
}

// CallerGone aborts the prompt promptID, its retry chain included, when it
// still runs on this replica: its caller went away and asked for that
// (PromptRequest.cancel_on_disconnect). The prompt ends aborted, and its
// chain and prompt_end say "caller disconnected". A prompt that has ended
// (or is sending its prompt_end), or runs on another replica, is left
// alone. It does not wait for the prompt to end.
func (s *Session) CallerGone(promptID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running || s.ending || s.promptID != promptID {
		return
	}
	s.m.log.Info("prompt aborted: its caller went away", "session", s.id, "prompt", promptID)
	s.abortLocked(stopCaller)
}

// Prompt starts a prompt and returns its id and a subscription positioned
// just before its first event. The prompt runs on its own: the caller may
// stop reading at any time.
func (s *Session) Prompt(ctx context.Context, text string) (string, *Subscription, error) {
	return s.PromptWith(ctx, text, PromptOptions{})
}

// PromptOptions are a prompt's own settings.
type PromptOptions struct {
	// Params, when set, override the session's model parameters for this
	// prompt's calls: each field set replaces the session's (thinking as a
	// whole). They are checked as the session's were; a refused prompt
	// changes nothing.
	Params *provider.Params
}

// PromptWith is Prompt with the prompt's own settings.
func (s *Session) PromptWith(ctx context.Context, text string, o PromptOptions) (string, *Subscription, error) {
	if strings.TrimSpace(text) == "" {
		return "", nil, invalid("text", "is empty")
	}
	if len(text) > s.m.opts.MaxPromptBytes {
		return "", nil, invalid("text", "is %d bytes, more than the limit of %d", len(text), s.m.opts.MaxPromptBytes)
	}
	params := s.params
	if o.Params != nil {
		params = mergeParams(s.params, *o.Params)
		if err := s.m.checkParams(s.primary, params); err != nil {
			return "", nil, err
		}
	}
	s.mu.Lock()
	p := s.m.providerOf(s.model)
	s.mu.Unlock()
	if v, ok := p.Client.(PromptValidator); ok {
		if err := v.ValidatePrompt(text); err != nil {
			return "", nil, invalid("text", "%v", err)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for s.running && s.ending {
		// The previous prompt has sent its prompt_end and is storing its
		// last events: a prompt sent on seeing prompt_end waits for that.
		done := s.runDone
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			s.mu.Lock()
			return "", nil, ctx.Err()
		}
		s.mu.Lock()
	}
	switch {
	case s.deleted:
		return "", nil, fmt.Errorf("%w: %s", ErrNotFound, s.id)
	case s.chain.open:
		return "", nil, fmt.Errorf("%w: a retry chain is in progress (AbortRetry or Abort it first)", ErrBusy)
	case s.running:
		return "", nil, fmt.Errorf("%w: a prompt is running (wait for its prompt_end or Abort it)", ErrBusy)
	case s.checking:
		return "", nil, unavailable("start the prompt", errors.New("this replica's copy of the session's events is being checked against the store after a lost lease; try again shortly"))
	}
	// Counted under the manager's lock (taken after the session's: the only
	// order they are taken in together): Close either sees this run or
	// refuses it.
	s.m.mu.RLock()
	closed := s.m.closed
	if !closed {
		s.m.runs.Add(1)
	}
	s.m.mu.RUnlock()
	if closed {
		return "", nil, ErrClosed
	}
	started := false
	defer func() {
		if !started {
			s.m.runs.Done()
		}
	}()
	promptID := newID("prm_")
	user := provider.Message{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: text}}}
	// The lease, the prompt's place among its tenant's (until its
	// prompt_end) and the user message are taken in one step of the store.
	sub, err := s.m.rep.begin(ctx, s, promptID, user)
	if err != nil {
		return "", nil, err
	}
	runCtx, cancel := context.WithCancel(s.m.baseCtx)
	s.running, s.promptID, s.cancelRun, s.abortCause, s.chain = true, promptID, cancel, stopNone, chain{}
	s.runParams, s.thinkingOff, s.reasoningRetried = params, false, false
	if s.m.opts.Tracer != nil {
		s.runTrace = trace.SpanContextFromContext(ctx)
	}
	s.runDone = make(chan struct{})
	gen := s.generation
	started = true
	s.m.workers.start(func() { s.run(runCtx, cancel, gen, promptID, nil) })
	return promptID, sub, nil
}

// persistLocked appends an entry to the persisted history and returns its
// index.
func (s *Session) persistLocked(ctx context.Context, promptID string, msg provider.Message, mc *ModelChange) (int64, error) {
	return s.persistEntryLocked(ctx, Entry{Time: s.m.opts.Now(), PromptID: promptID, Message: msg, ModelChange: mc})
}

// persistEntryLocked appends e to the persisted history and returns its
// index.
func (s *Session) persistEntryLocked(ctx context.Context, e Entry) (int64, error) {
	idx, err := s.m.store.Append(context.WithoutCancel(ctx), s.id, e)
	if err != nil {
		s.fenceOnLocked(err)
		return 0, fmt.Errorf("persist history: %w", unavailable("persist history", err))
	}
	s.entries++
	s.histBytes += entrySize(e)
	return idx, nil
}

// appendContextLocked persists msg and appends it to the runtime context.
func (s *Session) appendContextLocked(ctx context.Context, promptID string, msg provider.Message) error {
	return s.appendEntryLocked(ctx, Entry{Time: s.m.opts.Now(), PromptID: promptID, Message: msg})
}

// appendEntryLocked persists e and appends its message to the runtime
// context.
func (s *Session) appendEntryLocked(ctx context.Context, e Entry) error {
	msg := e.Message
	idx, err := s.persistEntryLocked(ctx, e)
	if err != nil {
		return err
	}
	s.context = append(s.context, msg)
	s.ctxIndex = append(s.ctxIndex, idx)
	return nil
}

// emit publishes e to the session's log and queues it for the stored
// stream (readers get it once the store holds it).
func (s *Session) emit(e Event) {
	e, h := s.log.publish(e)
	if s.m.opts.Tracer != nil {
		s.traceEvent(&e)
	}
	if e.Seq == 0 {
		return
	}
	if mr, ok := s.m.events.(*MemoryReplica); ok {
		// In process: the store holds the event as the log does.
		mr.appendEvent(s.id, e, &h, s.log)
		return
	}
	s.m.events.AppendEvent(s.id, e)
}

// emitDelta is emit of d's message_update, held as the log and the
// in-process store keep a delta (heldEvent) from the start: no Event of
// 456 bytes made, copied through the calls and compared with its compact
// form for every chunk (a message_update is not traced).
func (s *Session) emitDelta(promptID string, d provider.Delta) {
	h := heldEvent{typ: EventMessageUpdate, promptID: promptID, text: d.Text, thinking: d.Thinking}
	if d.ToolCallID != "" || d.ToolName != "" || d.ToolArgsPart != "" {
		h.tool = &ToolCallDelta{CallID: d.ToolCallID, Name: d.ToolName, InputDelta: d.ToolArgsPart}
	}
	if s.log.publishHeld(&h) == 0 {
		return
	}
	if mr, ok := s.m.events.(*MemoryReplica); ok {
		mr.appendHeld(s.id, &h, s.log)
		return
	}
	s.m.events.AppendEvent(s.id, h.event(s.id))
}

// run is one prompt: the first agent run and every continuation of its retry
// chain, until the chain has ended. It always ends with prompt_end.
// A prompt taken over from a lost replica (res non-nil) resumes its retry or
// ends.
//
// cancel is ctx's: it runs when the prompt has ended, on every path, so that
// nothing of the run stays attached to the manager's context.
func (s *Session) run(ctx context.Context, cancel context.CancelFunc, gen uint64, promptID string, res *resumePoint) {
	defer s.m.runs.Done()
	defer cancel()
	stopLease := s.m.rep.hold(s, promptID)
	started := time.Now()
	s.mu.Lock()
	s.runSpent, s.runWasted = Spend{}, Spend{}
	if res != nil {
		// Taken over: what the prompt spent on the lost replica, as its run
		// recorded it with the retry (the session's totals were saved
		// with the record at the same time).
		s.runSpent, s.runWasted = res.spent, res.wasted
	}
	parent := s.runTrace
	s.runTrace = trace.SpanContext{}
	s.mu.Unlock()
	ctx, span := s.startPromptSpan(ctx, promptID, parent)
	var outcome, errText string
	switch {
	case res != nil && res.lost:
		outcome, errText = OutcomeFailed, ErrOwnerLost
		s.mu.Lock()
		s.closeOwnerLostLocked(ctx, promptID, res)
		s.mu.Unlock()
	case res != nil:
		outcome, errText = s.resume(ctx, gen, promptID, res)
	default:
		outcome, errText = s.loop(ctx, gen, promptID, 0)
	}
	s.releaseProbe() // claimed and never made
	stopLease()

	s.mu.Lock()
	if s.fenced {
		// Another replica ends or resumes the prompt from the stored log.
		// The store forgets its lease and queued events (Release drops the
		// lease too while it is still this replica's: a stream that lost
		// events), so that any replica's janitor takes the prompt over.
		s.mu.Unlock()
		s.releaseLease()
		s.mu.Lock()
		s.endFencedLocked()
		close(s.runDone)
		s.mu.Unlock()
		return
	}
	if s.handoff {
		// Handed to the other replicas: no prompt_end, the run record stays.
		s.handoff = false
		s.endPromptSpan(span, TakeoverHandedOff, "", s.runSpent, s.runWasted)
		s.mu.Unlock()
		s.handOver()
		s.mu.Lock()
		s.chain = chain{}
		s.running, s.cancelRun, s.promptID = false, nil, ""
		close(s.runDone)
		s.mu.Unlock()
		return
	}
	if ctx.Err() != nil && outcome != OutcomeAborted {
		outcome = OutcomeAborted
	}
	if outcome == OutcomeAborted && errText == "" {
		errText = s.abortCause.abortError()
	}
	s.closeDanglingToolCallsLocked(ctx, promptID)
	s.switchedTo = pickedCred{}
	// Every exit path resolves the gate.
	s.chain = chain{}
	// The ending's writes (Finish, then Flush and EndRun) share one bound.
	ectx, cancelEnd := context.WithTimeout(context.Background(), s.m.leaseTTL())
	defer cancelEnd()
	// Frees the prompt's place among its tenant's too, before prompt_end:
	// a client that saw it may start another.
	s.m.rep.end(ectx, s, promptID, outcome, errText)
	s.emit(Event{Type: EventPromptEnd, PromptID: promptID, Outcome: outcome, Error: errText,
		Usage: usagePtr(s.runSpent.Usage), CostUSD: s.runSpent.Cost(),
		RetryUsage: usagePtr(s.runWasted.Usage), RetryCostUSD: s.runWasted.Cost()})
	s.endPromptSpan(span, outcome, errText, s.runSpent, s.runWasted)
	s.m.opts.Observer.PromptEnded(outcome, time.Since(started))
	s.ending = true
	s.mu.Unlock()
	s.m.rep.release(ectx, s, promptID)
	s.mu.Lock()
	s.ending = false
	if s.fenced {
		// Lost while its last events were being stored.
		s.endFencedLocked()
	}
	s.running, s.cancelRun, s.promptID = false, nil, ""
	s.m.rep.idle(s)
	close(s.runDone)
	s.mu.Unlock()
}

// pickedCred is a credential picked ahead of the call that uses it (see
// Session.switchedTo); none: the provider has none, and the call goes
// without one.
type pickedCred struct {
	provider string
	cred     provider.Credential
	none     bool
}

// loop runs agent runs until the prompt is done and returns its outcome.
// call is the index of its first model call in the prompt.
func (s *Session) loop(ctx context.Context, gen uint64, promptID string, call int) (outcome, errText string) {
	starting := call == 0
	for {
		// Before the prompt and before every continuation: back to the
		// primary model once its cooldown has expired.
		s.maybeRevert(ctx, promptID)
		if starting {
			// A prompt does not start on a model cooling down.
			s.avoidCooldown(ctx, promptID)
			starting = false
		}
		s.emit(Event{Type: EventAgentStart, PromptID: promptID})
		t, toolErr := s.runTurns(ctx, promptID, &call)
		res := t.Result
		s.emit(Event{Type: EventAgentEnd, PromptID: promptID})
		msg := res.Message
		failed := msg.StopReason == provider.StopError || msg.StopReason == provider.StopAborted
		switch {
		case toolErr != "" && ctx.Err() == nil:
			return OutcomeFailed, toolErr
		case !failed && ctx.Err() == nil:
			return OutcomeCompleted, ""
		}
		if ctx.Err() != nil {
			// A user abort, a delete, a shutdown or a lost lease: never
			// retried. An open chain ends with what stopped the run.
			by := s.runStop()
			s.endChainIfOpen(promptID, by.chainOutcome(), by.finalError())
			return OutcomeAborted, ""
		}
		v := t.verdict
		allowFallback := true
		if msg.StopReason == provider.StopAborted {
			// Only a content-less abort carrying the generic sentinel, outside
			// any user abort, retries — and never with model fallback.
			if !retry.IsReasonlessAbort(msg.StopReason, msg.ErrorMessage, len(msg.Content) > 0) {
				s.endChainIfOpen(promptID, ChainCancelled, msg.ErrorMessage)
				return OutcomeAborted, msg.ErrorMessage
			}
			v = retry.ReasonlessAbortVerdict()
			allowFallback = false
		}
		if v.Class == retry.ClassContextOverflow {
			// retry.overflow_fallback: on to a model with a larger context
			// window, if the chain has one; the overflow is not retried on
			// this model.
			if s.overflowFallback(ctx, promptID, &msg) {
				continue
			}
			s.emit(Event{Type: EventContextOverflow, PromptID: promptID, ErrorMessage: msg.ErrorMessage})
		}
		if !v.Retryable {
			final := msg.ErrorMessage
			if v.OverLimit {
				// Says why it is not retried: the provider's wording may
				// read like a throttle's (docs/retry-policy.md §1.9).
				final = v.Reason + " (not retried). Original error: " + msg.ErrorMessage
			}
			s.endChainIfOpen(promptID, ChainNotRetryable, final)
			return OutcomeFailed, final
		}
		cont, final, by := s.handleRetryable(ctx, gen, promptID, &t, v, allowFallback, call)
		if cont {
			// The failed call is thrown away: the retry goes on without it.
			s.mu.Lock()
			s.wasteLocked(&t)
			s.mu.Unlock()
		}
		if !cont {
			if ctx.Err() != nil || by != stopNone {
				return OutcomeAborted, final
			}
			return OutcomeFailed, final
		}
	}
}

// runTurns is one run's model calls: it calls the model, and while the model
// stops to use tools, announces the tool calls, waits for the client's
// results and calls the model again. It returns the last call's result, and
// a non-empty error when the tool results never came.
func (s *Session) runTurns(ctx context.Context, promptID string, call *int) (turn, string) {
	for {
		t := s.callModel(ctx, promptID, *call)
		*call++
		msg := &t.Message
		if msg.StopReason == provider.StopError || msg.StopReason == provider.StopAborted {
			return t, ""
		}
		// The success message_end of a retry chain emits auto_retry_end; the
		// gate stays until the run ends (prompt_end), after its tools ran.
		s.chainSucceeded(promptID)
		calls := toolCallsOf(msg)
		if msg.StopReason != provider.StopToolUse || len(calls) == 0 {
			s.mu.Lock()
			s.thinkingOff = false // the tool loop has ended
			s.mu.Unlock()
			return t, ""
		}
		if errText := s.awaitToolResults(ctx, promptID, calls); errText != "" {
			return t, errText
		}
		// A tool loop does not grow the history past its bound either:
		// it ends here, its results stored, before the next call.
		s.mu.Lock()
		full := s.historyFullLocked()
		s.mu.Unlock()
		if full != nil {
			return t, full.Error()
		}
	}
}

// turn is one model call's result and, for an error stop, its retry verdict.
type turn struct {
	provider.Result
	verdict retry.Verdict
	// cost is the call's cost, nil when unpriced.
	cost *float64
	// allBlocked: no credential could be picked; allBlockedFor is the time
	// until the earliest blocked one frees up.
	allBlocked    bool
	allBlockedFor time.Duration
	// ownKey: the call was made with a credential of the session's tenant's
	// own, not the server's; serverKey: with one of the server's.
	ownKey, serverKey bool
}

// private reports that the call failed on the tenant's own key for a
// cause of that key's account (a rate limit, a quota): what the fleet
// shares of a failing model (the cooldown, its probe, the retry budget)
// learns nothing of it, so that one tenant's key never sends another
// tenant's sessions off a model or spends their retries.
func (t *turn) private() bool { return t.ownKey && t.verdict.KeyScoped }

// serverKeys reports that the call failed on one of the server's keys for
// a cause of that key's account: the fleet's cooldown is then the server's
// keys' (serverKeysName), which the sessions that call the model with
// their tenant's own keys do not heed.
func (t *turn) serverKeys() bool { return t.serverKey && t.verdict.KeyScoped }

// callModel makes one model call, in a span of its own when the prompt is
// traced.
func (s *Session) callModel(ctx context.Context, promptID string, call int) turn {
	if s.m.opts.Tracer == nil {
		return s.callModelOnce(ctx, promptID, call)
	}
	a := s.startAttempt(ctx, call)
	t := s.callModelOnce(ctx, promptID, call)
	s.endAttempt(a, &t)
	return t
}

// callModelOnce makes one model call: message_start, message_update as output
// streams, message_end; the assistant message goes to the history and the
// runtime context.
func (s *Session) callModelOnce(ctx context.Context, promptID string, call int) turn {
	s.mu.Lock()
	model := s.model
	p := s.m.providerOf(model)
	req := &provider.Request{
		SessionID: s.id,
		Model:     strings.TrimPrefix(model, p.Name+"/"),
		System:    s.system,
		Messages:  append([]provider.Message(nil), s.context...),
		Tools:     s.tools,
		Call:      call,
		Answered:  growStack,
	}
	params, thinkingOff := s.runParams, s.thinkingOff
	s.streaming = true
	switched := s.switchedTo
	s.switchedTo = pickedCred{}
	s.mu.Unlock()

	origin := provider.Origin{Provider: p.Name, Model: req.Model}
	if s.m.opts.Credentials != nil && switched.provider == p.Name && (switched.cred.ID != "" || switched.none) {
		req.Credential = switched.cred
	} else if s.m.opts.Credentials != nil {
		var prefer string
		if !p.RotateCredentials {
			s.mu.Lock()
			prefer = s.sticky[p.Name]
			s.mu.Unlock()
		}
		cred, _, err := s.m.opts.Credentials.PickPreferred(ctx, s.tenant, p.Name, prefer)
		if err != nil {
			s.emit(Event{Type: EventMessageStart, PromptID: promptID, Role: provider.RoleAssistant, Model: model})
			res := provider.Result{Message: provider.Message{
				Role: provider.RoleAssistant, StopReason: provider.StopError,
				ErrorMessage: "no credential available: " + err.Error(),
			}}
			var blocked *credstore.AllBlockedError
			if !errors.As(err, &blocked) {
				return s.finishCall(ctx, promptID, model, origin, res, nil)
			}
			s.avoidedPaced(p.Name, "") // it waits for a credential
			// Every sibling is usage-limited: a usage limit whose wait is the
			// earliest unblock (step 7 without a switch).
			v := retry.AllCredentialsBlocked()
			t := s.finishCall(ctx, promptID, model, origin, res, &v)
			t.allBlocked, t.allBlockedFor = true, max(blocked.In, 0)
			return t
		}
		// The call's credential, none for a provider without any (a
		// fallback to it leaves no other provider's credential behind).
		req.Credential = cred
		s.mu.Lock()
		s.credential = cred
		s.mu.Unlock()
	}
	if req.Credential.ID != "" {
		s.mu.Lock()
		s.stickLocked(p.Name, req.Credential.ID)
		s.mu.Unlock()
	}
	s.avoidedPaced(p.Name, req.Credential.ID)
	// The runtime context as this call's target may take it: reasoning
	// state goes back only to the provider, model and account that made
	// it (the context itself keeps it, for a later call to them).
	origin.Account = req.Credential.AccountName()
	req.Messages = provider.StripForeignReasoning(req.Messages, origin)
	req.Params = s.callParams(p, req.Model, params, thinkingOff, req.Messages)
	s.emit(Event{Type: EventMessageStart, PromptID: promptID, Role: provider.RoleAssistant, Model: model, Credential: req.Credential.ID})

	started := time.Now()
	var ttft time.Duration
	res := p.Client.Stream(ctx, req, func(d provider.Delta) {
		if ttft == 0 {
			ttft = time.Since(started)
		}
		s.emitDelta(promptID, d)
	})
	t := s.finishCall(ctx, promptID, model, origin, res, nil)
	t.ownKey = req.Credential.Owner != ""
	t.serverKey = req.Credential.ID != "" && !t.ownKey
	if req.Credential.ID != "" {
		s.mu.Lock()
		if s.ownKeys == nil {
			s.ownKeys = map[string]bool{}
		}
		s.ownKeys[p.Name] = t.ownKey
		s.mu.Unlock()
	}
	s.settleProbeCall(model, &t)
	if p.Pace && t.RateLimit != nil && req.Credential.ID != "" && t.Message.StopReason != provider.StopError {
		s.pace(ctx, p.Name, req.Credential.ID, t.RateLimit)
	}
	if b := s.m.opts.Budget; b != nil && t.Message.StopReason != provider.StopError && t.Message.StopReason != provider.StopAborted {
		b.Succeeded(model)
	}
	c := Call{Provider: p.Name, Model: model, Duration: time.Since(started), TTFT: ttft, StopReason: t.Message.StopReason,
		Usage: t.Usage, CostUSD: t.cost}
	if t.Message.StopReason == provider.StopError {
		if t.Failure != nil {
			c.Status = t.Failure.Status
		}
		c.Class = string(t.verdict.Class)
	}
	s.m.opts.Observer.ModelCalled(c)
	return t
}

// pace blocks credID when a successful response's rate-limit headers show
// a bucket at 0 remaining: the next call would get a 429 (reason paced).
func (s *Session) pace(ctx context.Context, providerName, credID string, headers http.Header) {
	pacer, ok := s.m.opts.Credentials.(Pacer)
	if !ok {
		return
	}
	pc, ok := retry.PaceFromHeaders(headers, s.m.opts.Now())
	if !ok {
		return
	}
	reason := fmt.Sprintf("paced: %s is 0 until its reset in %v", pc.Bucket, pc.Wait.Round(time.Millisecond))
	if err := pacer.Paced(context.WithoutCancel(ctx), s.tenant, providerName, credID, pc.Wait, reason); err != nil {
		s.m.log.Warn("credential store: pacing block not recorded", "session", s.id, "provider", providerName, "err", err)
		return
	}
	s.m.log.Info("credential paced: blocked until its rate limit resets", "session", s.id, "provider", providerName,
		"credential", credID, "bucket", pc.Bucket, "wait_ms", pc.Wait.Milliseconds())
	s.mu.Lock()
	if s.paced == nil {
		s.paced = map[string]string{}
	}
	s.paced[providerName] = credID
	s.mu.Unlock()
}

// RateLimitObserver is an Observer that also hears of the 429s pacing
// avoided: a call that, after pacing blocked the credential its session
// used, goes to another credential of the provider or waits for one.
type RateLimitObserver interface {
	RateLimitAvoided(provider string)
}

// avoidedPaced reports a 429 avoided when the session's next call to
// providerName after a pacing block does not go to the paced credential
// (credID: the call's, "" when it waits for one).
func (s *Session) avoidedPaced(providerName, credID string) {
	s.mu.Lock()
	paced, ok := s.paced[providerName]
	delete(s.paced, providerName)
	s.mu.Unlock()
	if !ok || paced == credID {
		return
	}
	if o, ok := s.m.opts.Observer.(RateLimitObserver); ok {
		o.RateLimitAvoided(providerName)
	}
}

// callParams are the model parameters of a call of p's model: params
// fitted to it (fitParams), and without thinking when the provider refused
// it for the open tool loop (thinkingOff) or when Anthropic would (the
// loop's last assistant turn, as msgs has it for this call, does not start
// with thinking of its own: another model or account made it). What
// changed is logged.
func (s *Session) callParams(p Provider, model string, params provider.Params, thinkingOff bool, msgs []provider.Message) provider.Params {
	fitted, notes := fitParams(p, model, params)
	if fitted.Thinking != nil {
		switch {
		case thinkingOff:
			fitted.Thinking = nil
			notes = append(notes, "params.thinking: off until the open tool loop ends (the provider refused its reasoning)")
		case p.Kind == provider.KindAnthropic && provider.OpenToolTurnLacksThinking(msgs):
			fitted.Thinking = nil
			notes = append(notes, "params.thinking: off for this call (the open tool loop's last turn has no thinking of this model and account)")
		}
	}
	if len(notes) > 0 {
		s.m.log.Info("model parameters fitted to the call", "session", s.id, "model", p.Name+"/"+model, "changes", notes)
	}
	return fitted
}

// finishCall ends a model call: message_end, history, runtime context. An
// error stop is classified, unless verdict gives the classification. The
// message's blocks get origin (the call's provider, model and account)
// before they are stored.
func (s *Session) finishCall(ctx context.Context, promptID, model string, origin provider.Origin, res provider.Result, verdict *retry.Verdict) turn {
	msg := &res.Message
	msg.Role = provider.RoleAssistant
	msg.Model = model
	msg.SetOrigin(origin)
	if msg.StopReason == "" {
		msg.StopReason = provider.StopEnd
	}
	if msg.StopReason == provider.StopError && msg.ErrorMessage == "" {
		msg.ErrorMessage = "Unknown error"
	}
	if msg.StopReason == provider.StopError || msg.StopReason == provider.StopAborted {
		stripIncompleteToolCalls(msg)
	}
	var v retry.Verdict
	cost := s.m.costOf(model, res.Usage)
	end := Event{Type: EventMessageEnd, PromptID: promptID, Model: model, StopReason: msg.StopReason,
		ErrorMessage: msg.ErrorMessage, StopDetails: msg.StopDetails, Text: msg.Text(),
		Usage: usagePtr(res.Usage), CostUSD: cost}
	if msg.StopReason == provider.StopError {
		if verdict != nil {
			v = *verdict
		} else {
			v = retry.Classify(failureOf(&res, s.providerKind(model)), s.m.opts.Now())
		}
		end.ErrorClass = v.EventClass()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streaming = false
	if res.Usage.PromptTokens() > 0 {
		s.warmModel, s.warmAccount = model, origin.Account
	}
	if credentialFailed(&res) {
		// The key itself was refused: the next call takes another.
		delete(s.sticky, s.m.providerOf(model).Name)
	}
	s.spent.add(res.Usage, cost)
	s.runSpent.add(res.Usage, cost)
	// The history keeps every entry, error entries included.
	e := Entry{Time: s.m.opts.Now(), PromptID: promptID, Message: *msg, Usage: usagePtr(res.Usage), CostUSD: cost}
	if err := s.appendEntryLocked(ctx, e); err != nil {
		s.m.log.Error("persist assistant message", "session", s.id, "err", err)
	}
	s.emit(end)
	return turn{Result: res, verdict: v, cost: cost}
}

// failureOf turns a provider result into the retry engine's input.
func failureOf(res *provider.Result, kind string) retry.Failure {
	f := retry.Failure{
		StopReason:       res.Message.StopReason,
		ErrorMessage:     res.Message.ErrorMessage,
		StopDetails:      res.Message.StopDetails,
		API:              kind,
		ObservableOutput: res.Message.HasObservableOutput(),
	}
	if res.Failure != nil {
		f.Status, f.Headers, f.ErrorType, f.ErrorCode = res.Failure.Status, res.Failure.Headers, res.Failure.Type, res.Failure.Code
		f.Body = res.Failure.Body
	}
	return f
}

func (s *Session) providerKind(model string) string {
	return s.m.providerOf(model).Kind
}

// providerOf returns the provider of a provider/model reference that was
// validated when it was set.
func (m *Manager) providerOf(model string) Provider {
	name, _, _ := strings.Cut(model, "/")
	return m.providers[name]
}

// chainSucceeded is the success message_end of a retry chain:
// auto_retry_end{success:true} (docs/retry-policy.md §5). The gate itself
// resolves at the end of the run (prompt_end), so a recovered turn's tool
// calls finish first.
func (s *Session) chainSucceeded(promptID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reasoningRetried = false
	if s.chain.attempt > 0 {
		if s.fallback != nil && s.model != s.fallback.original {
			s.emit(Event{Type: EventRetryFallbackSucceeded, PromptID: promptID, Model: s.model, Role: s.fallback.role})
			s.m.opts.Observer.FallbackSucceeded(s.fallback.role)
		}
		s.endChainLocked(promptID, chainEnd{outcome: ChainSuccess, attempt: s.chain.attempt, keepGate: true})
	}
}

// runStop is what aborted the running prompt: its abort's cause, or the
// shutdown when the manager's context ended without one.
func (s *Session) runStop() stop {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.abortCause == stopNone {
		return stopShutdown
	}
	return s.abortCause
}

// endChainIfOpen ends a retry chain that a non-retried stop interrupts, so
// that every auto_retry_start is followed by an auto_retry_end.
func (s *Session) endChainIfOpen(promptID string, outcome ChainOutcome, finalError string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.chain.attempt > 0 {
		s.endChainLocked(promptID, chainEnd{outcome: outcome, attempt: s.chain.attempt, final: finalError})
	}
	s.chain = chain{} // no sleep is under way: its own goroutine is here
}

// A chainEnd is how a retry chain ended.
type chainEnd struct {
	outcome ChainOutcome
	attempt int    // the attempt auto_retry_end reports
	final   string // the final error ("" on success)
	// quiet: the chain announced no retry, so no auto_retry_end (a refusal
	// without a fallback on its first failure).
	quiet bool
	// keepGate: the gate stays open until the run ends (a recovered turn's
	// tool calls finish first).
	keepGate bool
}

// endChainLocked is the one place a retry chain ends: its auto_retry_end,
// the observer and the log hear of it, and its counter (and gate) reset.
func (s *Session) endChainLocked(promptID string, e chainEnd) {
	if !e.quiet {
		s.emit(Event{Type: EventAutoRetryEnd, PromptID: promptID, Success: e.outcome == ChainSuccess, Attempt: e.attempt, FinalError: e.final})
	}
	s.chain.attempt = 0
	if !e.keepGate {
		s.chain.open = false
	}
	if s.fenced {
		// The chain goes on, or ends, on the replica taking the prompt over.
		return
	}
	s.m.opts.Observer.ChainEnded(e.outcome)
	s.m.log.Info("retry chain ended", "session", s.id, "outcome", e.outcome, "attempt", e.attempt,
		"model", s.model, "credential", s.credential.ID, "final_error", e.final)
}
