package wire

import (
	"encoding/base64"
	"testing"
)

func TestRedact(t *testing.T) {
	const key = "sk-proj-Abc123Def456Ghi789Jkl012Mno345"
	for _, tc := range []struct{ in, want string }{
		{"Incorrect API key provided: sk-proj-********************************o345. You can find your API key at https://platform.openai.com/account/api-keys.",
			"Incorrect API key provided: [REDACTED]. You can find your API key at https://platform.openai.com/account/api-keys."},
		{"Incorrect API key provided: sk-abc12***************************wxyz.", "Incorrect API key provided: [REDACTED]."},
		{"key " + key + " is bad", "key [REDACTED] is bad"},
		{"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc rejected", "Authorization: Bearer [REDACTED] rejected"},
		{"prefix Abc123Def456 of the key", "prefix [REDACTED] of the key"},
		{"a key ending Mno345 (short piece)", "a key ending Mno345 (short piece)"},
		{"sk-ant-api03-zzzzzzzzzzzzzzzzzzzzzz from someone else", "[REDACTED] from someone else"},
		// Ordinary wordings are left alone.
		{"Rate limit reached for gpt-4 in organization org-uVqpjtJiKqvVJMVfvpaounIh on tokens per min (TPM): Limit 10000, Used 8554, Requested 3082. Please try again in 9.816s.",
			"Rate limit reached for gpt-4 in organization org-uVqpjtJiKqvVJMVfvpaounIh on tokens per min (TPM): Limit 10000, Used 8554, Requested 3082. Please try again in 9.816s."},
		{"Previous response with id 'resp_abc' not found.", "Previous response with id 'resp_abc' not found."},
		{"prompt is too long: 205351 tokens > 200000 maximum", "prompt is too long: 205351 tokens > 200000 maximum"},
		{"task-runner risk-assessment", "task-runner risk-assessment"},
	} {
		if got := redact(tc.in, key); got != tc.want {
			t.Errorf("redact(%q) =\n%q\nwant\n%q", tc.in, got, tc.want)
		}
	}
	// Base64 echoes: the key alone, and inside "user:key" (Basic auth), in
	// both alphabets, with and without padding.
	for _, plain := range []string{key, "user:" + key, "x" + key + "yz"} {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			in := "header was Basic " + enc.EncodeToString([]byte(plain)) + " (rejected)"
			if got, want := redact(in, key), "header was Basic [REDACTED] (rejected)"; got != want {
				t.Errorf("redact(%q) = %q, want %q", in, got, want)
			}
		}
	}
	if in := "id " + base64.StdEncoding.EncodeToString([]byte("nothing secret here")); redact(in, key) != in {
		t.Errorf("base64 of something else was redacted: %q", redact(in, key))
	}
	if got := redact("short abc", "abc"); got != "short abc" {
		t.Errorf("a secret under 8 bytes is not searched for: %q", got)
	}
}
