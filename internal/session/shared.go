package session

import (
	"context"
	"errors"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/retry"
)

// Shared is the store of sessions: session records, persisted histories,
// event logs, leases, the durable state of running prompts and control
// messages between replicas. Redis lets several replicas serve the same
// sessions; a MemoryStore keeps them in this process (Options.Shared nil).
// It is the sum of the parts each side of the engine uses: Store for the
// session core, Leases, EventStream and ControlBus for replication (lease.go,
// mirror.go, control.go, takeover.go).
//
// Every method is safe for concurrent use. Errors are the store's (a Redis
// error); "not found" is reported through ok results, never as an error.
type Shared interface {
	Store
	Leases
	EventStream
	ControlBus
}

// Store is what the session core keeps of a session: its record, history
// and stripped set.
type Store interface {
	// History stores the persisted histories (Entry.Index is the list index).
	History

	// Create stores a new session's record and indexes it for its tenant,
	// unless the tenant has max sessions already (max <= 0: no bound): the
	// count and the index entry are one atomic step, so that the bound holds
	// however many replicas create sessions at once. A refused session is
	// not stored (Created false).
	Create(ctx context.Context, r Record, max int) (CreateResult, error)
	// Load returns a session's record, with MessageCount (the history's
	// length) and LastSeq (the newest event's seq) filled in; ok is false
	// when there is no such session.
	Load(ctx context.Context, id string) (r Record, ok bool, err error)
	// ListRecords returns up to limit records of tenant whose Order is greater than
	// after, in increasing Order (MessageCount and LastSeq filled in).
	ListRecords(ctx context.Context, tenant string, after uint64, limit int) ([]Record, error)
	// Save writes the mutable part of a session's record.
	Save(ctx context.Context, id string, m Mutable) error
	// Remove deletes every key of the session and its tenant index entry,
	// and tells every replica following it (its Follow channel closes).
	Remove(ctx context.Context, id, tenant string) error

	// Strip records that the history entry at index left the runtime
	// context (a failed message dropped by a retry, step 11).
	Strip(ctx context.Context, id string, index int64) error
	// Stripped returns the indexes recorded by Strip.
	Stripped(ctx context.Context, id string) ([]int64, error)
}

// Leases is how a prompt holds its session (lease.go, takeover.go): the
// lease with its epoch, the run's durable state and the tenant's prompt
// slots. Every write of a prompt is fenced by the lease's epoch.
type Leases interface {
	// Acquire takes the session's lease for this replica for ttl when no
	// replica holds it (SET NX PX). When another holds it, ok is false and
	// holder names it.
	Acquire(ctx context.Context, id string, ttl time.Duration) (ok bool, holder string, err error)
	// Start begins a prompt here in one step: it takes the session's lease
	// for ttl when no replica holds it (as Acquire), stores r as its run and
	// adds the session to the running set (as SaveRun), returns the record
	// (as Load, MessageCount counting the entries before first), and
	// appends first to the history when it is not nil (as Append; its
	// index is MessageCount). When the session has no record, or another
	// replica holds the lease, nothing is taken or written (Found, Started
	// and Holder say which).
	//
	// With a slot (Tenant not ""), the prompt also takes its place among
	// its tenant's running prompts for ttl, unless the tenant has max
	// running already (max <= 0: no bound); then nothing is taken or
	// written either (Limited). In the same round trip as the rest: a
	// refused prompt costs a second one, to take back what it took.
	Start(ctx context.Context, id string, ttl time.Duration, r Run, first *Entry, slot PromptSlot, max int) (StartResult, error)
	// Unappend removes the history's last entry when it is at index: the
	// user message Start appended for a prompt that then could not start.
	Unappend(ctx context.Context, id string, index int64) error
	// Finish writes the mutable part of the record (as Save) and the run's
	// state (as SaveRun, the session staying in the running set) at once,
	// and frees the prompt's slot (PromptSlot zero: none).
	Finish(ctx context.Context, id string, m Mutable, r Run, slot PromptSlot) error
	// Renew extends this replica's lease; false when it no longer holds it.
	// The prompt's slot (PromptSlot zero: none) is extended with it, and
	// the session is in the set of running sessions after it (put back,
	// should another replica's late EndRun have removed it).
	Renew(ctx context.Context, id string, ttl time.Duration, slot PromptSlot) (bool, error)
	// Occupy gives a prompt its place among its tenant's running prompts
	// for ttl, whatever their number: a prompt taken over from a lost
	// replica goes on counting.
	Occupy(ctx context.Context, slot PromptSlot, ttl time.Duration) error
	// Release drops the lease if this replica holds it.
	Release(ctx context.Context, id string) error
	// Holder is the replica holding the lease, "" when none.
	Holder(ctx context.Context, id string) (string, error)

	// SaveRun stores the durable state of the session's running prompt and
	// adds the session to the set of running sessions.
	SaveRun(ctx context.Context, id string, r Run) error
	// LoadRun returns the state SaveRun stored; ok false when none.
	LoadRun(ctx context.Context, id string) (r Run, ok bool, err error)
	// EndRun ends the run of the replica holding the session's lease: when
	// this replica holds it, it drops the run state and the lease in one
	// step, and removes the session from the set and the prompt's slot
	// (PromptSlot zero: none); otherwise it does nothing.
	EndRun(ctx context.Context, id string, slot PromptSlot) error
	// Running returns the ids in the set of running sessions.
	Running(ctx context.Context) ([]string, error)
}

// EventStream is the stored event log (the owner's writer, mirror.go).
type EventStream interface {
	// AppendEvent queues an event (already stamped with its seq) for the
	// session's event stream. A background writer batches queued events
	// (pipelined XADDs with id <seq>-0, the stream trimmed to about the
	// configured length) and then notifies the replicas following the
	// session. It never blocks on Redis.
	AppendEvent(id string, e Event)
	// Flush returns once every event AppendEvent queued for id before the call
	// is stored (or could not be: the writer's error).
	Flush(ctx context.Context, id string) error
	// Events returns up to count stored events with seq greater than
	// after, in order. A first event whose seq is beyond after+1 means the
	// ones in between were trimmed.
	Events(ctx context.Context, id string, after uint64, count int) ([]Event, error)
	// Follow calls notify(false) whenever another replica stores events of
	// the session, and notify(true) once when the session is removed;
	// notify must not block (it runs on the store's reader). stop ends it.
	// At most one follower per id at a time.
	Follow(id string, notify func(removed bool)) (stop func())
	// WatchEvents sets the functions told what becomes of the events
	// AppendEvent queued.
	WatchEvents(w EventWatch)
}

// ControlBus carries control calls between replicas (control.go).
type ControlBus interface {
	// ReplicaID names this process among the replicas (unique per process).
	ReplicaID() string
	// Call sends a control message to replica and waits for its reply, or
	// for ctx. It fails with ErrNoReplica when no replica by that name
	// listens.
	Call(ctx context.Context, replica string, c Control) (Reply, error)
	// Serve sets the handler of control messages sent to this replica. Each
	// message is handled in a goroutine of its own.
	Serve(h func(ctx context.Context, c Control) Reply)
}

// StartPicker is a Shared store whose Start can carry the prompt's first
// credential pick in its own round trip (a pipeline of both stores' scripts
// on one Redis client): a happy prompt then makes one round trip before
// its model call.
type StartPicker interface {
	// StartPick is Start plus the pick: Credentials.PickPreferred(ctx,
	// pick.Tenant, pick.Provider, pick.Prefer). The pick's outcome is
	// Picked; neither OK nor None (not picked, the pick failed, or every
	// credential is blocked) leaves it to the call.
	StartPick(ctx context.Context, id string, ttl time.Duration, r Run, first *Entry, slot PromptSlot, max int, pick CredentialPick) (StartResult, Picked, error)
}

// CredentialPick is a pick StartPick makes.
type CredentialPick struct {
	Tenant, Provider, Prefer string
}

// Picked is the credential StartPick picked for the prompt's first call
// (OK), or that the provider has none (None: PickPreferred's answer
// without an error and not ok), so that the call goes without one and
// does not ask again.
type Picked struct {
	Credential provider.Credential
	OK         bool
	None       bool
}

// StartResult is what Shared.Start did.
type StartResult struct {
	Found   bool   // the session exists
	Started bool   // the lease is this replica's and the run is stored
	Holder  string // the replica holding the lease (when Found)
	Record  Record // the record, with MessageCount and LastSeq (when Started)
	// Limited: the session was free but its tenant had Prompts running,
	// its limit; nothing was taken.
	Limited bool
	Prompts int
	// Epoch is the lease's fencing token (when Started): every write of
	// the prompt carries it, and the store refuses it (ErrFenced) once the
	// lease is another's.
	Epoch uint64
}

// CreateResult is what Shared.Create did.
type CreateResult struct {
	Created bool
	Order   uint64 // the session's order, increasing over every replica (when Created)
	// Sessions is the tenant's sessions: this one included when Created,
	// at least the limit when not.
	Sessions int
}

// PromptSlot is a running prompt's place among its tenant's: the store
// counts a tenant's running prompts for the limit of concurrent prompts,
// each slot lasting as long as the prompt's lease (a lost replica's slots
// expire with its leases). The zero PromptSlot is none.
type PromptSlot struct {
	Tenant   string
	PromptID string
}

// ErrNoReplica: a control message found no replica to take it.
var ErrNoReplica = errors.New("no replica by that name is listening")

// Record is a session as the shared store keeps it.
type Record struct {
	ID           string          `json:"id"`
	Tenant       string          `json:"tenant"`
	Role         string          `json:"role"`
	System       string          `json:"system,omitempty"`
	Primary      string          `json:"primary"`
	Tools        []provider.Tool `json:"tools,omitempty"`
	Params       provider.Params `json:"params,omitzero"`
	Created      time.Time       `json:"created"`
	Order        uint64          `json:"order"`
	Mutable      `json:"mutable"`
	MessageCount int    `json:"-"`
	LastSeq      uint64 `json:"-"`
}

// Mutable is the part of a record that changes after creation.
type Mutable struct {
	Model    string         `json:"model"`
	Settings retry.Settings `json:"settings"`
	Fallback *FallbackState `json:"fallback,omitempty"`
	// Spent is what the session's model calls spent so far (nil in
	// records written before it was kept: nothing known).
	Spent *Spend `json:"spent,omitempty"`
	// Credentials are the credentials the session keeps, by provider name
	// (the one it used last: see Credentials.PickPreferred).
	Credentials map[string]string `json:"credentials,omitempty"`
	// OwnKeys are the providers whose last call used a key of the
	// tenant's own (Session.ownKeys): the server's keys' cooldowns are not
	// the session's concern there.
	OwnKeys []string `json:"ownKeys,omitempty"`
	// Warm is where the session's prompt cache is: the model and account
	// of its last call that read or wrote a prompt ("": none yet), so that
	// a replica taking the session over knows when a switch loses it.
	Warm *WarmCache `json:"warm,omitempty"`
}

// WarmCache is the model and account holding a session's prompt cache.
type WarmCache struct {
	Model   string `json:"model"`
	Account string `json:"account,omitempty"`
}

// FallbackState is a session's active model fallback.
type FallbackState struct {
	Role     string `json:"role"`
	Original string `json:"original"`
	Pinned   bool   `json:"pinned,omitempty"`
}

// Run is the durable state of a running prompt: enough for another replica
// to end it, or to resume its retry, when its owner is lost.
type Run struct {
	PromptID string `json:"promptId"`
	Replica  string `json:"replica"`
	// A retry waiting in backoff: its attempt, when it is due, and the
	// chain's state at that point.
	Attempt     int       `json:"attempt,omitempty"`
	Due         time.Time `json:"due,omitzero"`
	Class       string    `json:"class,omitempty"`
	DelaySource string    `json:"delaySource,omitempty"`
	Credential  string    `json:"credential,omitempty"`
	// Calls is the number of model calls the prompt made so far; Spent
	// and Wasted what they spent, and the part of it retries threw away
	// (prompt_end.usage and retryUsage), so that a replica taking the
	// prompt over goes on counting.
	Calls  int    `json:"calls,omitempty"`
	Spent  *Spend `json:"spent,omitempty"`
	Wasted *Spend `json:"wasted,omitempty"`
	// Params are the prompt's model parameters when the prompt overrode
	// the session's (nil: the session's).
	Params *provider.Params `json:"params,omitempty"`
	// Ending: the prompt has ended (its prompt_end is going out); the
	// holder is about to release the lease. Outcome and Error are its
	// prompt_end's: a replica that takes over a run lost while ending
	// stores that prompt_end when the stored log lacks it.
	Ending  bool   `json:"ending,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Control is a call one replica makes to the owner of a session.
type Control struct {
	Op        ControlOp    `json:"op"`
	SessionID string       `json:"sessionId"`
	Enabled   bool         `json:"enabled,omitempty"` // OpSetAutoRetry
	Cause     string       `json:"cause,omitempty"`   // OpAbort
	Results   []ToolResult `json:"results,omitempty"` // OpSubmitToolResults
}

// ControlOp is what a Control asks of the owner.
type ControlOp string

// Control operations.
const (
	OpState             ControlOp = "state"
	OpAbortRetry        ControlOp = "abort_retry"
	OpAbort             ControlOp = "abort"
	OpSubmitToolResults ControlOp = "submit_tool_results"
	OpSetAutoRetry      ControlOp = "set_auto_retry"
)

// Reply is the owner's answer to a Control.
type Reply struct {
	// Err is the error kind, "" for success.
	Err   ReplyErr `json:"err,omitempty"`
	Field string   `json:"field,omitempty"` // ReplyInvalid
	Msg   string   `json:"msg,omitempty"`
	State *State   `json:"state,omitempty"` // OpState
}

// ReplyErr is the kind of error a Reply reports (it crosses replicas as
// JSON: a string on the wire, a type here).
type ReplyErr string

// Reply error kinds.
const (
	ReplyInvalid    ReplyErr = "invalid"
	ReplyNotWaiting ReplyErr = "not_waiting"
	ReplyNotOwner   ReplyErr = "not_owner"
	ReplyOther      ReplyErr = "other"
)

// ErrFenced: the store refused a write of a prompt because the session's
// lease is no longer this replica's (it expired, or another replica took
// the prompt over). Nothing of the write was stored.
var ErrFenced = errors.New("the session's lease is no longer this replica's: write refused")

// ErrEventsLost: events of a prompt could not be stored because the stored
// stream lost the ones before them (a failover dropped writes its replicas
// never had). Nothing of them was stored.
var ErrEventsLost = errors.New("the stored event stream lost events")

// EventWatch is told what becomes of the events Shared.AppendEvent queued:
// Stored when a session's events up to seq are stored, Lost when its
// queued events will never be (err is ErrFenced, ErrEventsLost, or the
// writer's queue overflowed), stored being the newest seq the store holds
// then (0: unknown). They run on the store's writer: they must not block.
type EventWatch struct {
	Stored func(id string, seq uint64)
	Lost   func(id string, stored uint64, err error)
}
