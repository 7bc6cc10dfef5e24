package retry

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaultSettings(t *testing.T) {
	t.Parallel()
	s := DefaultSettings()
	if !s.Enabled || s.MaxRetries != 10 || s.BaseDelay != 500*time.Millisecond || s.MaxDelay != 5*time.Minute ||
		!s.ModelFallback || s.FallbackChains != nil || s.FallbackRevertPolicy != "cooldown-expiry" {
		t.Errorf("DefaultSettings() = %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Errorf("DefaultSettings().Validate() = %v", err)
	}
	if !s.RevertsOnCooldownExpiry() {
		t.Error("default policy does not revert")
	}
	s.FallbackRevertPolicy = RevertNever
	if s.RevertsOnCooldownExpiry() {
		t.Error(`"never" reverts`)
	}
}

func TestSettingsValidate(t *testing.T) {
	t.Parallel()
	mod := func(f func(*Settings)) Settings { s := DefaultSettings(); f(&s); return s }
	cases := []struct {
		name string
		s    Settings
		want []string // substrings, one per expected error; nil = valid
	}{
		{"defaults", DefaultSettings(), nil},
		{"zero value", Settings{}, nil},
		{"disabled", mod(func(s *Settings) { s.Enabled = false }), nil},
		{"max retries 0", mod(func(s *Settings) { s.MaxRetries = 0 }), nil},
		{"max delay 0 disables cap", mod(func(s *Settings) { s.MaxDelay = 0 }), nil},
		{"max delay negative disables cap", mod(func(s *Settings) { s.MaxDelay = -time.Second }), nil},
		{"base delay 0", mod(func(s *Settings) { s.BaseDelay = 0 }), nil},
		{"policy never", mod(func(s *Settings) { s.FallbackRevertPolicy = "never" }), nil},
		{"policy empty means default", mod(func(s *Settings) { s.FallbackRevertPolicy = "" }), nil},
		{"chains", mod(func(s *Settings) {
			s.FallbackChains = map[string][]string{
				"default": {"anthropic/claude-sonnet-4-5", "openai/gpt-5:high", "openrouter/z-ai/glm-4.7@cerebras"},
				"smol":    {},
			}
		}), nil},
		{"negative max retries", mod(func(s *Settings) { s.MaxRetries = -1 }), []string{"retry.max_retries must be >= 0"}},
		{"negative base delay", mod(func(s *Settings) { s.BaseDelay = -time.Millisecond }), []string{"retry.base_delay_ms must be >= 0"}},
		{"bad policy", mod(func(s *Settings) { s.FallbackRevertPolicy = "trafilatura" }), []string{"retry.fallback_revert_policy must be"}},
		{"bad selector no slash", mod(func(s *Settings) { s.FallbackChains = map[string][]string{"default": {"gpt-4o"}} }), []string{"retry.fallback_chains.default[0]"}},
		{"bad selector empty parts", mod(func(s *Settings) { s.FallbackChains = map[string][]string{"task": {"ok/model", "/model", "provider/"}} }), []string{"retry.fallback_chains.task[1]", "retry.fallback_chains.task[2]"}},
		{"bad selector spaces", mod(func(s *Settings) { s.FallbackChains = map[string][]string{"default": {"openai/gpt 4o"}} }), []string{"retry.fallback_chains.default[0]"}},
		{"empty role", mod(func(s *Settings) { s.FallbackChains = map[string][]string{"": {"a/b"}} }), []string{"retry.fallback_chains has an empty role name"}},
		{"several problems", mod(func(s *Settings) {
			s.MaxRetries, s.BaseDelay, s.FallbackRevertPolicy = -3, -time.Second, "sometimes"
		}), []string{"retry.max_retries", "retry.base_delay_ms", "retry.fallback_revert_policy"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tc.want)
			}
			if !errors.Is(err, ErrInvalidSettings) {
				t.Errorf("errors.Is(%v, ErrInvalidSettings) = false", err)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "retry.") {
				t.Errorf("errors.As(%v, *FieldError) failed or field %q lacks retry.", err, fe)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(tc.want) {
				t.Errorf("Validate() reported %d problems (%q), want %d", n, err, len(tc.want))
			}
		})
	}
}

// With applies what is set and keeps the rest.
func TestSettingsWith(t *testing.T) {
	five, off, never := 5, false, RevertNever
	d := 2 * time.Second
	s := DefaultSettings().With(Overrides{MaxRetries: &five, BaseDelay: &d, ModelFallback: &off, FallbackRevertPolicy: &never,
		FallbackChains: map[string][]string{"default": {"a/b"}}})
	want := DefaultSettings()
	want.MaxRetries, want.BaseDelay, want.ModelFallback, want.FallbackRevertPolicy = 5, d, false, RevertNever
	want.FallbackChains = map[string][]string{"default": {"a/b"}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("With = %+v, want %+v", s, want)
	}
	if got := DefaultSettings().With(Overrides{}); !reflect.DeepEqual(got, DefaultSettings()) {
		t.Errorf("With(nothing) = %+v", got)
	}
}
