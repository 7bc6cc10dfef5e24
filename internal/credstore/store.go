// Package credstore keeps providers' credentials and their state: which are
// blocked by a usage limit and until when, how many banked resets each has,
// and whose turn it is. It is step 7 of the retry policy
// (docs/retry-policy.md §3): when a
// credential hits a usage limit, block it and switch to a sibling at once;
// failing that, spend a banked reset (opt-in); failing that, tell the retry
// engine when the earliest blocked sibling frees up.
//
// Two implementations behave identically (one conformance suite runs
// against both): [Memory], the embedded default for a single replica, and
// [Redis], shared by every replica of agentd. Credentials come from the
// configuration file (Source [SourceConfig]) and from the CredentialService
// API (Source [SourceAPI]). Secrets are write-only: [Info] has no secret,
// and a [Credential] never formats its secret.
//
// Ownership: a credential is a server credential (Owner empty: it serves
// every tenant; the configuration file's are all server credentials) or a
// tenant's own (Owner is the tenant: "bring your own key"). Ids are
// namespaced by owner: two tenants may each have a credential "x", and
// neither can see, probe or touch the other's. A tenant's own ids are
// unique across providers, and none may be a server credential's id.
//
// Pools: a session of tenant T calls a provider with a credential of T's
// pool for it: T's own credentials of the provider first (round-robin among
// the available ones, on T's own cursor), then the server's (round-robin on
// the server's cursor, shared by every tenant), used only while every one
// of T's own is blocked or when T has none. A server credential whose id is
// one of T's own of the provider (an admin added it after T's) is shadowed
// in T's pool: T's id means T's credential. A usage limit blocks the
// credential (for every pool it is in: a server credential's limit is the
// provider's) and switches to an available sibling of the same pool, own
// ones first; redeeming a banked reset and the earliest unblock look at that
// pool too. Another tenant's credentials are never in T's pool.
//
// Credential states: available, or blocked until a time with a reason
// (the provider's error text, sanitised). A block ends by itself when its
// time passes; a banked reset ends it early. Blocks are kept as the later of
// the old and the new time, except that a window the provider stated
// replaces one that agentd only estimated.
package credstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentd/agentd/internal/provider"
)

// Store is a credential store. Both [Memory] and [Redis] implement it; all
// methods are safe for concurrent use.
type Store interface {
	// Add stores a credential and returns its state; an empty ID gets a
	// generated one. c.Owner empty adds a server credential, else one that
	// tenant owns. IDs are unique across providers within an owner, and a
	// tenant's may not be a server credential's. Adding a SourceConfig
	// credential whose ID exists as a SourceConfig credential of the same
	// provider updates it (secret, auto-redeem, account, and the banked-reset count
	// by the change of its configured value) and keeps its state, so every
	// replica can add its configuration at start. Anything else with an
	// existing ID is ErrExists.
	Add(ctx context.Context, c Credential) (Info, error)
	// Delete removes owner's credential id ("" : a server credential),
	// added through the API: ErrNotFound when owner has none with that id;
	// for a tenant owner, ErrForbidden when id is a server credential's;
	// ErrReadOnly for a SourceConfig credential. Another owner's credential
	// with that id is never touched.
	Delete(ctx context.Context, owner, id string) error
	// List returns the credentials f selects, by provider name, each
	// provider's server credentials first and then each owner's (by owner),
	// each in the order they were added. Infos carry no secret.
	List(ctx context.Context, f Filter) ([]Info, error)
	// Pick returns the credential for tenant's next call to providerName
	// from tenant's pool (see the package comment; tenant "" has the
	// server's credentials only): round-robin among the available ones (the
	// rotation is shared by every replica of a Redis store), skipping
	// blocked ones. ok is false when the pool is empty. When all are
	// blocked, err is an *AllBlockedError (errors.Is ErrAllBlocked) that
	// says when the earliest frees up.
	Pick(ctx context.Context, tenant, providerName string) (c provider.Credential, ok bool, err error)
	// PickPreferred is Pick that keeps a session on the credential it used
	// last (its provider's prompt cache is per account): prefer, when it is
	// in tenant's pool and available (a server credential only while none
	// of the tenant's own is: the pool's order first), without moving the
	// rotation; else what Pick picks. prefer "" is Pick.
	PickPreferred(ctx context.Context, tenant, providerName, prefer string) (c provider.Credential, ok bool, err error)
	// UsageLimited is step 7 of the retry flow, in tenant's pool of
	// providerName (credID is tenant's own, else a server credential; any
	// other is ErrNotFound). It blocks credID until now + window (window ≤
	// 0: DefaultBlock) with reason, then, in order: switches to an available
	// sibling of the pool (Switched); or, when a blocked credential of the
	// pool with AutoRedeem has banked resets (credID first, then the others
	// in pool order), spends exactly one, unblocks it and switches to it
	// (Switched, Redeemed); or reports the earliest moment a blocked sibling
	// frees up (HasSibling, SiblingFreeIn). fromProvider says window is the
	// provider's own (else agentd's estimate).
	UsageLimited(ctx context.Context, tenant, providerName, credID string, window time.Duration, fromProvider bool, reason string) (Switch, error)
	// Ready reports whether the store is fully working, for /readyz: nil,
	// or an error wrapping ErrDegraded that says why (it keeps serving).
	Ready(ctx context.Context) error
	// Degraded reports that the store serves from a local view because its
	// backend is unreachable (always false for Memory).
	Degraded() bool
	// Close stops background work. It does not close a Redis client it was
	// given.
	Close() error
}

// Errors of the store. Errors never contain a secret.
var (
	ErrNotFound = errors.New("credential not found")
	ErrExists   = errors.New("credential already exists")
	ErrReadOnly = errors.New("credential comes from the configuration file")
	ErrInvalid  = errors.New("invalid credential")
	// ErrForbidden: a tenant asked to delete a server credential (only an
	// admin may). Map it to codes.PermissionDenied.
	ErrForbidden = errors.New("credential serves every tenant: only an admin may change it")
	// ErrLimit: the tenant owns as many credentials of the provider as
	// the store allows (see LimitError). Map it to
	// codes.ResourceExhausted.
	ErrLimit = errors.New("credential limit reached")
	// ErrAllBlocked: every credential of the provider is blocked (see
	// AllBlockedError).
	ErrAllBlocked = errors.New("every credential is blocked")
	// ErrUnavailable: the shared store is unreachable and the operation
	// cannot be served from the local view (adding or deleting an API
	// credential). Map it to codes.Unavailable.
	ErrUnavailable = errors.New("credential store unavailable")
	// ErrDegraded: Ready's error while the shared store is unreachable and
	// the store serves from its local view. The replica still serves, so
	// /readyz should report it rather than take the replica out of
	// rotation (every replica is degraded at once when Redis is down).
	ErrDegraded = errors.New("credential store degraded")
)

// AllBlockedError is Pick's error when every credential of Provider is
// blocked.
type AllBlockedError struct {
	Provider string
	// Until is when the earliest block ends (this replica's clock); In is
	// the time from the call until then.
	Until time.Time
	In    time.Duration
}

func (e *AllBlockedError) Error() string {
	return fmt.Sprintf("every credential of provider %q is blocked; the earliest frees up in %s (at %s)",
		e.Provider, e.In.Round(time.Millisecond), e.Until.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrAllBlocked) true.
func (e *AllBlockedError) Is(target error) bool { return target == ErrAllBlocked }

// LimitError is Add's error for a tenant that owns Limit credentials of
// Provider already, the store's bound.
type LimitError struct {
	Provider string
	Limit    int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("tenant has %d credentials of provider %q, the limit; delete one before adding another", e.Limit, e.Provider)
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Sources of a credential.
const (
	SourceConfig = "config"
	SourceAPI    = "api"
)

// Statuses of a credential.
const (
	StatusAvailable = "available"
	StatusBlocked   = "blocked"
)

// Block bounds.
const (
	// DefaultBlock is the block of a usage limit without a window (the
	// reference's 60 s).
	DefaultBlock = time.Minute
	// MaxBlock caps a block.
	MaxBlock = 30 * 24 * time.Hour
	// maxReasonBytes bounds a stored block reason.
	maxReasonBytes = 256
)

// Filter selects the credentials List returns.
type Filter struct {
	// Provider: only this provider's ("": every provider's).
	Provider string
	// Tenant: the server credentials and Tenant's own ("": the server
	// credentials only). Ignored with All.
	Tenant string
	// All: every owner's credentials (an admin's view).
	All bool
}

// Credential is a credential to store. Its secret never appears when it is
// formatted or logged.
type Credential struct {
	ID       string
	Provider string
	Secret   string `json:"-"`
	Source   string // SourceConfig or SourceAPI ("" means SourceAPI)
	// Owner is the tenant that owns the credential and alone uses it; ""
	// for a server credential. Only SourceAPI credentials have one.
	Owner string
	// BankedResets is the number of saved usage-limit resets. For a
	// SourceConfig credential it is the configured value: the store keeps
	// the live count (spending decrements it) and applies only changes of
	// the configured value.
	BankedResets int
	// AutoRedeem lets UsageLimited spend a banked reset of this credential
	// without asking (opt-in).
	AutoRedeem bool
	// Account is the account (organisation) the credential belongs to at
	// its provider, which reasoning state is bound to: credentials naming
	// the same account share it. Empty: the credential is an account of
	// its own (its ID). Pick and UsageLimited return it in
	// provider.Credential.Account, filled in with the ID when empty.
	Account string
}

// accountOf is the account a credential's picks carry: its Account, else
// its ID.
func accountOf(account, id string) string {
	if account != "" {
		return account
	}
	return id
}

// String never prints the secret.
func (c Credential) String() string {
	if c.Owner != "" {
		return fmt.Sprintf("credential(%s, provider %s, %s, owner %s)", c.ID, c.Provider, c.Source, c.Owner)
	}
	return fmt.Sprintf("credential(%s, provider %s, %s)", c.ID, c.Provider, c.Source)
}

// GoString never prints the secret.
func (c Credential) GoString() string {
	return fmt.Sprintf("credstore.Credential{ID:%q, Provider:%q, Secret:<redacted>, Source:%q, Owner:%q, BankedResets:%d, AutoRedeem:%t, Account:%q}",
		c.ID, c.Provider, c.Source, c.Owner, c.BankedResets, c.AutoRedeem, c.Account)
}

// Format makes every fmt verb (%v, %+v, %#v, %s, %d, …) print String or
// GoString, never the secret.
func (c Credential) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = f.Write([]byte(c.GoString()))
		return
	}
	_, _ = f.Write([]byte(c.String()))
}

// LogValue keeps the secret out of slog.
func (c Credential) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", c.ID), slog.String("provider", c.Provider), slog.String("source", c.Source),
		slog.String("owner", c.Owner), slog.String("account", c.Account))
}

// Info is a credential's state without its secret, as listings show it.
type Info struct {
	ID, Provider, Source string
	Owner                string // "" for a server credential
	Status               string // StatusAvailable or StatusBlocked
	// BlockedUntil, BlockReason and BlockEstimated are set when blocked.
	// BlockEstimated: the window was agentd's estimate, not the provider's.
	BlockedUntil   time.Time
	BlockReason    string
	BlockEstimated bool
	BankedResets   int
	AutoRedeem     bool
	// Account is the credential's account as it was given ("" when none
	// was: the credential is an account of its own).
	Account string
}

// Switch is the outcome of UsageLimited.
type Switch struct {
	// Switched: To is the credential to use now (delay 0).
	Switched bool
	To       provider.Credential
	// Redeemed: the switch spent one banked reset of To (which may be the
	// credential that hit the limit); BankedLeft is what To has left.
	Redeemed   bool
	BankedLeft int
	// SiblingFreeIn is the time until the earliest blocked sibling frees up,
	// when HasSibling (the provider has another credential) and not
	// Switched.
	SiblingFreeIn time.Duration
	HasSibling    bool
}

// normalize validates c and fills in its defaults (ID, Source).
func normalize(c Credential) (Credential, error) {
	switch {
	case c.Provider == "":
		return c, fmt.Errorf("%w: provider is empty", ErrInvalid)
	case c.Secret == "":
		return c, fmt.Errorf("%w: %s: secret is empty", ErrInvalid, c.ID)
	case c.BankedResets < 0:
		return c, fmt.Errorf("%w: %s: banked resets %d < 0", ErrInvalid, c.ID, c.BankedResets)
	case len(c.ID) > 200 || strings.IndexFunc(c.ID, unicode.IsControl) >= 0:
		return c, fmt.Errorf("%w: id is longer than 200 bytes or has control characters", ErrInvalid)
	case len(c.Owner) > 200 || strings.IndexFunc(c.Owner, unicode.IsControl) >= 0:
		return c, fmt.Errorf("%w: owner is longer than 200 bytes or has control characters", ErrInvalid)
	case len(c.Account) > 200 || strings.IndexFunc(c.Account, unicode.IsControl) >= 0 || !utf8.ValidString(c.Account):
		return c, fmt.Errorf("%w: %s: account is longer than 200 bytes or has control characters", ErrInvalid, c.ID)
	case c.Owner != "" && c.Source == SourceConfig:
		return c, fmt.Errorf("%w: %s: a configuration credential serves every tenant and has no owner", ErrInvalid, c.ID)
	}
	switch c.Source {
	case "":
		c.Source = SourceAPI
	case SourceConfig, SourceAPI:
	default:
		return c, fmt.Errorf("%w: %s: source %q is not %s or %s", ErrInvalid, c.ID, c.Source, SourceConfig, SourceAPI)
	}
	if c.ID == "" {
		c.ID = "cred_" + randomHex(6)
	}
	return c, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// normWindow is the block length for window: DefaultBlock when ≤ 0, at most
// MaxBlock, whole milliseconds (the Redis store's resolution), at least 1 ms.
func normWindow(window time.Duration) time.Duration {
	switch {
	case window <= 0:
		return DefaultBlock
	case window > MaxBlock:
		return MaxBlock
	case window < time.Millisecond:
		return time.Millisecond
	}
	return window.Truncate(time.Millisecond)
}

// sanitizeReason makes a block reason safe to store and show: the
// credential's own secret redacted, valid UTF-8 without control characters,
// at most maxReasonBytes.
func sanitizeReason(reason, secret string) string {
	if len(secret) >= 4 {
		reason = strings.ReplaceAll(reason, secret, "[redacted]")
	}
	reason = strings.ToValidUTF8(reason, "\uFFFD")
	reason = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, reason)
	reason = strings.TrimSpace(reason)
	if len(reason) > maxReasonBytes {
		cut := maxReasonBytes - len("…")
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut] + "…"
	}
	if reason == "" {
		reason = "usage limit reached"
	}
	return reason
}
