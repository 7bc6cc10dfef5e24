package wire

import (
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/agentd/agentd/internal/provider"
)

func TestNewRequest(t *testing.T) {
	req, err := NewRequest("http://example.test/v1/messages", []byte(`{"a":1}`), "x-api-key", "secret-123",
		map[string]string{"anthropic-version": "v1", "X-Gateway": "g"},
		map[string]string{"Anthropic-Version": "v2", "x-api-key": "not the key", "Accept": "*/*"})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(req.Body)
	if req.Method != http.MethodPost || req.URL.String() != "http://example.test/v1/messages" || string(body) != `{"a":1}` {
		t.Errorf("request %s %s %s", req.Method, req.URL, body)
	}
	for k, want := range map[string]string{
		"Content-Type":      "application/json",
		"Accept":            "*/*", // a later set replaces an earlier one
		"anthropic-version": "v2",
		"X-Gateway":         "g",
		"x-api-key":         "secret-123", // never replaced
		"Authorization":     "",
	} {
		if got := req.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}

	req, err = NewRequest("http://example.test", nil, "authorization", "secret-123")
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Authorization"); got != "Bearer secret-123" {
		t.Errorf("Authorization = %q", got)
	}
	req, err = NewRequest("http://example.test", nil, "api-key", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := req.Header["Api-Key"]; ok {
		t.Errorf("an empty secret is sent: %v", req.Header)
	}
	if _, err := NewRequest("://bad", nil, "", ""); err == nil {
		t.Error("a bad URL is accepted")
	}
}

// A client's Headers make each request's header its own: what one request
// (or the transport) does to it reaches neither the next nor the fixed set,
// and each call carries its own credential.
func TestHeadersAreEachRequests(t *testing.T) {
	hs := NewHeaders("authorization", map[string]string{"x-trace": "t", "Authorization": "Bearer configured"})
	a, err := hs.Request("http://example.test", nil, "key-a")
	if err != nil {
		t.Fatal(err)
	}
	a.Header.Set("X-Trace", "changed")
	a.Header.Add("Accept", "application/json")
	a.Header.Del("Content-Type")
	b, err := hs.Request("http://example.test", nil, "key-b")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string][]string{
		"X-Trace": {"t"}, "Accept": {"text/event-stream"}, "Content-Type": {"application/json"},
		"Authorization": {"Bearer key-b"},
	} {
		if got := b.Header.Values(k); !slices.Equal(got, want) {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if got := a.Header.Get("Authorization"); got != "Bearer key-a" {
		t.Errorf("the first request's credential = %q", got)
	}
	// No secret: the configured header goes as it is, as NewRequest sends it.
	c, _ := hs.Request("http://example.test", nil, "")
	if got := c.Header.Get("Authorization"); got != "Bearer configured" {
		t.Errorf("without a secret, Authorization = %q", got)
	}
}

func TestFailAPI(t *testing.T) {
	c := &Call{resp: &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"7"}}}}
	const key = "sk-ant-api03-Abc123Def456Ghi789"
	a := NewAcc("m", key, nil)
	res := a.FailAPI(c, APIError{Type: "rate_limit_error", Code: "c", Message: "429 slow down, " + key})
	m, f := res.Message, res.Failure
	if m.StopReason != provider.StopError || m.ErrorMessage != "429 rate_limit_error: slow down, [REDACTED]" || m.Model != "m" {
		t.Errorf("message = %+v", m)
	}
	if f == nil || f.Status != 429 || f.Type != "rate_limit_error" || f.Code != "c" || f.Headers.Get("retry-after") != "7" {
		t.Errorf("failure = %+v", f)
	}
}
