// Package credstore keeps providers' credentials and their state. This is
// the in-memory store: credentials from the configuration and from the
// CredentialService API, picked round-robin among siblings.
package credstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// Errors of the store.
var (
	ErrNotFound = errors.New("credential not found")
	ErrExists   = errors.New("credential already exists")
	ErrReadOnly = errors.New("credential comes from the configuration file")
)

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

// Credential is a stored credential.
type Credential struct {
	ID           string
	Provider     string
	Secret       string
	Source       string
	BankedResets int
	BlockedUntil time.Time
	BlockReason  string
	created      uint64
}

// Info is a credential without its secret, as listings show it.
type Info struct {
	ID, Provider, Source, Status, BlockReason string
	BlockedUntil                              time.Time
	BankedResets                              int
}

// Memory is the in-memory credential store.
type Memory struct {
	now func() time.Time

	mu    sync.Mutex
	creds map[string]*Credential
	next  map[string]int // round-robin cursor per provider
	seq   uint64
}

// NewMemory returns an empty store; now is its clock (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, creds: map[string]*Credential{}, next: map[string]int{}}
}

// Add stores a credential. An empty id gets a generated one.
func (m *Memory) Add(c Credential) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		c.ID = "cred_" + hex.EncodeToString(b[:])
	}
	if _, ok := m.creds[c.ID]; ok {
		return Info{}, fmt.Errorf("%w: %s", ErrExists, c.ID)
	}
	m.seq++
	c.created = m.seq
	m.creds[c.ID] = &c
	return m.infoLocked(&c), nil
}

// Delete removes a credential added through the API.
func (m *Memory) Delete(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.creds[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if c.Source == SourceConfig {
		return fmt.Errorf("%w: %s (remove it there)", ErrReadOnly, id)
	}
	delete(m.creds, id)
	return nil
}

// List returns the credentials of providerName (all when empty), oldest first.
func (m *Memory) List(providerName string) []Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Credential
	for _, c := range m.creds {
		if providerName == "" || c.Provider == providerName {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *Credential) int { return cmp.Compare(a.created, b.created) })
	infos := make([]Info, len(out))
	for i, c := range out {
		infos[i] = m.infoLocked(c)
	}
	return infos
}

func (m *Memory) infoLocked(c *Credential) Info {
	i := Info{ID: c.ID, Provider: c.Provider, Source: c.Source, BankedResets: c.BankedResets, Status: StatusAvailable}
	if c.BlockedUntil.After(m.now()) {
		i.Status, i.BlockedUntil, i.BlockReason = StatusBlocked, c.BlockedUntil, c.BlockReason
	}
	return i
}

// Pick returns the next available credential of providerName, round-robin
// among its siblings, skipping blocked ones. ok is false when the provider
// has no credentials at all.
func (m *Memory) Pick(_ context.Context, providerName string) (provider.Credential, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sibs []*Credential
	for _, c := range m.creds {
		if c.Provider == providerName {
			sibs = append(sibs, c)
		}
	}
	if len(sibs) == 0 {
		return provider.Credential{}, false, nil
	}
	slices.SortFunc(sibs, func(a, b *Credential) int { return cmp.Compare(a.created, b.created) })
	now := m.now()
	start := m.next[providerName]
	for i := range sibs {
		c := sibs[(start+i)%len(sibs)]
		if !c.BlockedUntil.After(now) {
			m.next[providerName] = (start + i + 1) % len(sibs)
			return provider.Credential{ID: c.ID, Secret: c.Secret}, true, nil
		}
	}
	return provider.Credential{}, true, fmt.Errorf("every credential of provider %q is blocked", providerName)
}

// UsageLimited is step 7 of the retry flow. Usage-limit blocks and sibling
// rotation are not recorded by this store yet: it reports that no switch
// happened, so the retry engine waits for the provider's hint or backs off.
func (m *Memory) UsageLimited(context.Context, string, string, time.Duration, bool, string) (Switch, error) {
	return Switch{}, nil
}

// Switch is the outcome of UsageLimited.
type Switch struct {
	Switched bool
	To       provider.Credential
	// SiblingFreeIn is the time until the earliest blocked sibling frees up,
	// when HasSibling.
	SiblingFreeIn time.Duration
	HasSibling    bool
}
