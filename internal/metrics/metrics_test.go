package metrics

import (
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// The (class, source) pairs whose backoff series start at 0 are exactly
// those retry.Plan gives a class a retry can start for: none is missing
// (its first sleep would be lost to rate()), none can never occur.
func TestBackoffSourcesCoverPlan(t *testing.T) {
	seen := map[string]map[string]bool{}
	settings := retry.DefaultSettings()
	settings.MaxDelay = 0 // never ExceedsMax: every plan sleeps
	for _, c := range []retry.Class{retry.ClassTransient, retry.ClassUsageLimit, retry.ClassContextOverflow,
		retry.ClassStaleReplay, retry.ClassRefusal, retry.ClassNotRetryable} {
		if !c.Retryable() {
			if _, ok := BackoffSources[string(c)]; ok {
				t.Errorf("BackoffSources lists %s, which never starts a retry", c)
			}
			continue
		}
		for _, switched := range []bool{false, true} {
			for _, sibling := range []bool{false, true} {
				for _, hint := range []time.Duration{-1, 0, time.Millisecond, time.Minute, 10 * time.Hour} {
					for _, sib := range []time.Duration{0, time.Second, time.Hour} {
						v := retry.Verdict{Class: c, Retryable: true, Hint: hint, HasHint: hint >= 0, UsageWindow: 30 * time.Minute}
						p := retry.Plan(retry.DelayInput{Attempt: 1, Settings: settings, Verdict: v, U: 0.5,
							Switched: switched, HasSibling: sibling, SiblingFreeIn: sib})
						if p.NoRetry {
							continue
						}
						if seen[string(c)] == nil {
							seen[string(c)] = map[string]bool{}
						}
						seen[string(c)][string(p.Source)] = true
						if !slices.Contains(BackoffSources[string(c)], string(p.Source)) {
							t.Errorf("retry.Plan gives %s the source %s, which BackoffSources lacks", c, p.Source)
						}
					}
				}
			}
		}
	}
	for c, sources := range BackoffSources {
		for _, s := range sources {
			if !seen[c][s] {
				t.Errorf("BackoffSources pairs %s with %s, which retry.Plan never gives", c, s)
			}
		}
	}
}

// Every class a status gives by itself (a message that says nothing more)
// has its provider_errors_total series at 0 for that status.
func TestStatusClassesCoverClassifier(t *testing.T) {
	for _, st := range Statuses {
		if st == Other {
			continue
		}
		code, _ := strconv.Atoi(st)
		for _, msg := range []string{"error", http.StatusText(code), st + " " + http.StatusText(code)} {
			if msg == "" {
				continue
			}
			for _, api := range []string{"anthropic", "openai-responses", "openai-chat"} {
				v := retry.Classify(retry.Failure{StopReason: "error", Status: code, ErrorMessage: msg, API: api}, time.Now())
				if !slices.Contains(StatusClasses[st], string(v.Class)) {
					t.Errorf("status %s, %q (%s) is %s, which StatusClasses[%s] = %v lacks", st, msg, api, v.Class, st, StatusClasses[st])
				}
			}
		}
	}
	for st := range StatusClasses {
		if !slices.Contains(Statuses, st) {
			t.Errorf("StatusClasses has status %s, not one of Statuses", st)
		}
	}
}

// series gathers the series of one family as label maps.
func series(t *testing.T, reg *prometheus.Registry, name string) []map[string]string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out = append(out, l)
		}
	}
	return out
}

// Only label combinations that can occur start at 0: a model with its own
// provider only, "other" models only for a provider that lists none, no
// "other" provider or role, takeovers only with Redis.
func TestSeriesStartOnlyForPossibleCombinations(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	New(reg, Options{Providers: []string{"sim", "open"}, Models: []string{"sim/echo", "sim/backup"},
		OpenProviders: []string{"open"}, Roles: []string{"chat"}, Backends: []string{"memory"}})
	attempts := series(t, reg, "agentd_retry_attempts_total")
	pairs := map[string]bool{}
	for _, s := range attempts {
		pairs[s["provider"]+" "+s["model"]] = true
		if !retry.Class(s["class"]).Retryable() {
			t.Errorf("retry attempts series of class %s, which never retries", s["class"])
		}
	}
	want := map[string]bool{"sim sim/echo": true, "sim sim/backup": true, "open other": true}
	if len(pairs) != len(want) {
		t.Errorf("retry attempts by provider and model: %v, want %v", pairs, want)
	}
	for p := range want {
		if !pairs[p] {
			t.Errorf("no retry attempts series for %s", p)
		}
	}
	if n := len(attempts); n != 3*len(BackoffSources) {
		t.Errorf("%d retry attempts series, want %d", n, 3*len(BackoffSources))
	}
	for _, name := range []string{"agentd_credentials", "agentd_provider_errors_total", "agentd_credential_blocks_total"} {
		for _, s := range series(t, reg, name) {
			if s["provider"] == Other {
				t.Errorf("%s{provider=other} starts at 0: every provider is configured", name)
			}
		}
	}
	for _, s := range series(t, reg, "agentd_model_fallbacks_applied_total") {
		if s["role"] != "chat" && s["role"] != "default" {
			t.Errorf("fallback series of role %q", s["role"])
		}
	}
	if n := len(series(t, reg, "agentd_session_takeovers_total")); n != 0 {
		t.Errorf("%d takeover series with the memory store", n)
	}
	reg = prometheus.NewPedanticRegistry()
	New(reg, Options{Providers: []string{"sim"}, Models: []string{"sim/echo"}, Backends: []string{"redis"}})
	if n := len(series(t, reg, "agentd_session_takeovers_total")); n != len(session.TakeoverOutcomes) {
		t.Errorf("%d takeover series with Redis, want %d", n, len(session.TakeoverOutcomes))
	}
}
