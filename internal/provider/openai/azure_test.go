package openai

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/testkit"
)

// Azure OpenAI: the deployment's path, api-version, the key in api-key
// (never Authorization), no prompt_cache_key, and a complete stream.
func TestAzureCompleteStream(t *testing.T) {
	s := newServer(t, providertest.Options{APIKey: secret})
	s.Enqueue(providertest.Step{Answer: &providertest.Answer{Text: []string{"Hello", " world"}, InputTokens: 12, OutputTokens: 2}})
	c := newClient(t, Options{Azure: true, BaseURL: s.URL + "/"})
	req := request()
	req.Model = "gpt-4o-prod"
	res, rec := streamT(t, c, req)
	m := res.Message
	if m.StopReason != provider.StopEnd || res.Failure != nil || m.Text() != "Hello world" || rec.Text() != "Hello world" {
		t.Fatalf("result = %+v", res)
	}
	if res.Usage != (provider.Usage{InputTokens: 12, OutputTokens: 2}) {
		t.Errorf("usage = %+v", res.Usage)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	r := reqs[0]
	if r.Path != "/openai/deployments/gpt-4o-prod/chat/completions" || r.Query != "api-version="+DefaultAzureAPIVersion {
		t.Errorf("request to %s?%s", r.Path, r.Query)
	}
	if r.Header.Get("api-key") != secret || r.Header.Get("Authorization") != "" {
		t.Errorf("headers %v", r.Header)
	}
	if bytes.Contains(r.Body, []byte("prompt_cache_key")) || !bytes.Contains(r.Body, []byte(`"include_usage":true`)) {
		t.Errorf("body %s", r.Body)
	}
	checkRequestHasNoSecret(t, r)
	if got, want := c.URL(), s.URL+"/openai/deployments/{deployment}/chat/completions?api-version=2024-10-21"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
}

func TestAzureURL(t *testing.T) {
	for _, tc := range []struct{ base, deployment, version, want string }{
		{"https://res.openai.azure.com", "gpt-4o", "2024-10-21", "https://res.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"},
		{"https://res.openai.azure.com/", "o3-mini", "2025-04-01-preview", "https://res.openai.azure.com/openai/deployments/o3-mini/chat/completions?api-version=2025-04-01-preview"},
		{"https://gw.example.com/azure?team=a", "a b/c", "2024-10-21", "https://gw.example.com/azure/openai/deployments/a%20b%2Fc/chat/completions?api-version=2024-10-21&team=a"},
	} {
		if got := azureURL(tc.base, tc.deployment, tc.version); got != tc.want {
			t.Errorf("azureURL(%q, %q) = %q, want %q", tc.base, tc.deployment, got, tc.want)
		}
	}
}

// Azure's failures as the client reports them, with the retry engine's
// verdict and hint.
func TestAzureFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		step   providertest.Step
		status int
		msg    string
		class  retry.Class
		hint   time.Duration
	}{
		{"429 with retry-after-ms", Options{},
			providertest.RawError(429, providertest.AzureRateLimit, "retry-after", "2", "retry-after-ms", "1500", "x-ms-retry-after-ms", "1500"),
			429, "429 429: Requests to the ChatCompletions_Create Operation", retry.ClassTransient, 1500 * time.Millisecond},
		{"429 with the wording only", Options{}, providertest.RawError(429, providertest.AzureRateLimit),
			429, "429 429: Requests to the ChatCompletions_Create Operation", retry.ClassTransient, 2 * time.Second},
		{"deployment not found", Options{}, providertest.RawError(404, providertest.AzureDeploymentNotFound),
			404, "404 DeploymentNotFound: The API deployment for this resource does not exist.", retry.ClassNotRetryable, 0},
		{"wrong key", Options{AuthHeader: "x-other-key"}, providertest.Step{},
			401, "401 401: Access denied due to invalid subscription key", retry.ClassNotRetryable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, providertest.Options{APIKey: secret})
			s.Enqueue(tc.step)
			tc.opts.Azure, tc.opts.BaseURL = true, s.URL
			c := newClient(t, tc.opts)
			res, _ := streamT(t, c, request())
			m, f := res.Message, res.Failure
			if m.StopReason != provider.StopError || !strings.HasPrefix(m.ErrorMessage, tc.msg) || f == nil || f.Status != tc.status {
				t.Fatalf("result = %+v failure %+v\nwant %q…", m, f, tc.msg)
			}
			v := retry.Classify(retry.Failure{StopReason: m.StopReason, ErrorMessage: m.ErrorMessage, API: provider.KindAzureOpenAI,
				Status: f.Status, Headers: f.Headers, ErrorType: f.Type, ErrorCode: f.Code, Body: f.Body}, time.Now())
			if v.Underlying != tc.class || v.Hint != tc.hint {
				t.Errorf("verdict = %s hint %v (%s), want %s hint %v", v.Underlying, v.Hint, v.Reason, tc.class, tc.hint)
			}
		})
	}
}

// A request without api-version is Azure's 404 (the fake's check).
func TestAzureFakeWantsAPIVersion(t *testing.T) {
	s := newServer(t, providertest.Options{})
	c := newClient(t, Options{API: APIChat, BaseURL: s.URL + "/openai/deployments/d", AuthHeader: "api-key"})
	res, _ := streamT(t, c, request())
	if f := res.Failure; f == nil || f.Status != 404 || !strings.Contains(res.Message.ErrorMessage, "Resource not found") {
		t.Fatalf("result = %+v", res)
	}
}

// Cancelling an Azure call after content aborts it and closes the
// connection; a cut stream is an error, never a silent stop.
func TestAzureCancelAndCut(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepHang, After: 1},
		providertest.Step{Kind: providertest.StepReset, After: 1})
	c := newClient(t, Options{Azure: true, BaseURL: s.URL})
	ctx, cancel := context.WithCancel(testkit.Context(t))
	defer cancel()
	rec := &providertest.Deltas{Hook: func(provider.Delta) { cancel() }}
	res := c.Stream(ctx, request(), rec.On)
	providertest.CheckNoSecret(t, res, secret)
	if m := res.Message; m.StopReason != provider.StopAborted || m.Text() != "Hello" || res.Failure != nil {
		t.Errorf("cancelled: %+v", res)
	}
	res, _ = streamT(t, c, request())
	if m := res.Message; m.StopReason != provider.StopError || m.StopDetails != provider.DetailInterruptedAfterContent || res.Failure == nil {
		t.Errorf("cut: %+v", res)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reqs[0].ClientGone {
		t.Errorf("the server did not observe the connection close")
	}
	for _, r := range reqs {
		checkRequestHasNoSecret(t, r)
	}
}
