package providertest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/provider"
)

// Deltas records the deltas of a Stream call: pass d.On as its onDelta.
// Hook, when set, sees each delta as it arrives.
type Deltas struct {
	All  []provider.Delta
	Hook func(provider.Delta)
}

// On records d (the onDelta callback).
func (r *Deltas) On(d provider.Delta) {
	r.All = append(r.All, d)
	if r.Hook != nil {
		r.Hook(d)
	}
}

// Text is the streamed text.
func (r *Deltas) Text() string {
	var b strings.Builder
	for _, d := range r.All {
		b.WriteString(d.Text)
	}
	return b.String()
}

// Thinking is the streamed thinking.
func (r *Deltas) Thinking() string {
	var b strings.Builder
	for _, d := range r.All {
		b.WriteString(d.Thinking)
	}
	return b.String()
}

// CheckNoSecret fails t when res, printed every way, carries secret or any
// 8-byte piece of it.
func CheckNoSecret(t testing.TB, res provider.Result, secret string) {
	t.Helper()
	text := fmt.Sprintf("%+v %#v", res, res)
	if res.Failure != nil {
		text += fmt.Sprintf(" %+v", *res.Failure) // the body and headers a pointer hides
	}
	for i := 0; i+8 <= len(secret); i++ {
		if strings.Contains(text, secret[i:i+8]) {
			t.Fatalf("result carries a piece of the secret %q: %s", secret[i:i+8], text)
		}
	}
}
