package session_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/anthropic"
	"github.com/agentd/agentd/internal/provider/openai"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// Reasoning state across a session's calls, against the fake providers,
// which sign thinking per account (of the key) and model and refuse
// foreign or altered state with the real 400s.

const (
	anthModel = "claude-sonnet-4-5"
	oaiModel  = "gpt-5"
	// The fake's keys.
	keyOne   = "sk-ant-one-0123456789"
	keyTwo   = "sk-ant-two-0123456789"
	keyOAI   = "sk-oai-0123456789"
	toolName = "get_weather"
)

// clock is a settable clock for cooldowns, blocks and timestamps.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type reasoningEnv struct {
	fake *providertest.Server
	m    *session.Manager
	clk  *clock
	log  *syncBuffer // the manager's log
}

// syncBuffer is a log sink safe for concurrent use.
type syncBuffer = testkit.LogBuffer

// newReasoningEnv has providers anth (Anthropic) and oai (OpenAI
// Responses, with encrypted reasoning) on one fake, the credentials given
// (their Provider set), and the chain default: oai/gpt-5.
func newReasoningEnv(t *testing.T, fake providertest.Options, settings retry.Settings, creds ...credstore.Credential) *reasoningEnv {
	t.Helper()
	srv := providertest.NewServer(fake)
	t.Cleanup(srv.Close)
	clk := &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	store := credstore.NewMemory(credstore.MemoryOptions{Now: clk.Now})
	for _, c := range creds {
		if _, err := store.Add(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	if settings.FallbackChains == nil {
		settings.FallbackChains = map[string][]string{"default": {"oai/" + oaiModel}}
	}
	logs := &syncBuffer{}
	m := session.NewManager(session.Options{
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Providers: []session.Provider{
			{Name: "anth", Kind: provider.KindAnthropic, Models: []string{anthModel},
				Client: anthropic.New(anthropic.Options{BaseURL: srv.URL})},
			{Name: "oai", Kind: provider.KindOpenAIResponses, Models: []string{oaiModel},
				Client: openai.New(openai.Options{API: openai.APIResponses, BaseURL: srv.URL + "/v1", EncryptedReasoning: true})},
		},
		Retry:             settings,
		Credentials:       rotatingAdapter{store},
		Cooldowns:         cooldown.NewMemory(clk.Now),
		Rand:              func() float64 { return 0 },
		Now:               clk.Now,
		ToolResultTimeout: time.Minute,
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return &reasoningEnv{fake: srv, m: m, clk: clk, log: logs}
}

// rotatingAdapter picks in rotation at every call, never keeping the
// session's credential: the worst case for reasoning state (a session
// keeps its credential unless it is blocked, which moves it as well).
type rotatingAdapter struct{ credstore.Store }

func (a rotatingAdapter) PickPreferred(ctx context.Context, tenant, p, _ string) (provider.Credential, bool, error) {
	return a.Store.Pick(ctx, tenant, p)
}

func cred(providerName, id, secret, account string) credstore.Credential {
	return credstore.Credential{ID: id, Provider: providerName, Secret: secret, Account: account}
}

// thinkingSession is a session on anth with a tool and thinking on.
func (e *reasoningEnv) thinkingSession(t *testing.T, o session.RetryOverrides) *session.Session {
	t.Helper()
	s, err := e.m.Create(context.Background(), "t", session.CreateParams{
		Model: "anth/" + anthModel, Retry: o,
		Tools:  []provider.Tool{{Name: toolName, InputSchema: []byte(`{"type":"object"}`)}},
		Params: provider.Params{Thinking: &provider.Thinking{BudgetTokens: 2048}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run sends text and answers the tool calls until prompt_end.
func run(t *testing.T, s *session.Session, text string) []session.Event {
	t.Helper()
	_, sub, err := s.Prompt(context.Background(), text)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	return answerTools(t, s, sub)
}

// toolRounds answers rounds tool calls, then text; it thinks (round
// numbered, so every thought differs) when the request asks for it.
func toolRounds(rounds int) func(*providertest.Request) providertest.Step {
	return func(r *providertest.Request) providertest.Step {
		n := bytes.Count(r.Body, []byte(`"tool_result"`)) + bytes.Count(r.Body, []byte(`"function_call_output"`))
		a := &providertest.Answer{}
		if thinks(r) {
			a.Thinking = []string{fmt.Sprintf("Round %d of request %d: ", n, r.Index), "the weather tool."}
		}
		if n < rounds {
			a.Tools = []providertest.ToolCall{{Name: toolName, Args: []string{`{"city":"Paris"}`}}}
		} else {
			a.Text = []string{"Sunny."}
		}
		return providertest.Step{Answer: a}
	}
}

func thinks(r *providertest.Request) bool {
	var body struct {
		Thinking  *struct{ Type string }   `json:"thinking"`
		Reasoning *struct{ Effort string } `json:"reasoning"`
	}
	_ = json.Unmarshal(r.Body, &body)
	return body.Thinking != nil && body.Thinking.Type == "enabled" || body.Reasoning != nil
}

// wireThinking is what a request sent of its thinking blocks: each
// signature (Anthropic) or encrypted content (Responses), in order.
func wireThinking(t *testing.T, r providertest.Request) []string {
	t.Helper()
	var body struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Input []struct {
			Type             string `json:"type"`
			EncryptedContent string `json:"encrypted_content"`
		} `json:"input"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("request %d: %v", r.Index, err)
	}
	var out []string
	for _, m := range body.Messages {
		var blocks []struct {
			Type      string  `json:"type"`
			Signature *string `json:"signature"`
		}
		_ = json.Unmarshal(m.Content, &blocks)
		for _, b := range blocks {
			if b.Type == "thinking" || b.Type == "redacted_thinking" {
				out = append(out, deref(b.Signature))
			}
		}
	}
	for _, it := range body.Input {
		if it.Type == "reasoning" {
			out = append(out, it.EncryptedContent)
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

// signatureOf is the signature the fake gave the thinking of request i's
// answer (its thinking as the fake streamed it, for account).
func signatureOf(r providertest.Request, account string) string {
	th := strings.Join(r.Step.Answer.Thinking, "")
	return providertest.AnthropicSignature(account, r.Model, th)
}

// accepted fails unless every request but those in except played its
// scripted answer (no reasoning rejection, no error).
func accepted(t *testing.T, reqs []providertest.Request, except ...int) {
	t.Helper()
	for _, r := range reqs {
		if slices.Contains(except, r.Index) {
			continue
		}
		if k := r.Step.Kind; k != "" && k != providertest.StepOK {
			t.Errorf("request %d was refused: %s %d %s", r.Index, k, r.Step.Status, r.Step.Body)
		}
	}
}

func keyOf(r providertest.Request) string {
	if k := r.Header.Get("x-api-key"); k != "" {
		return k
	}
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// A tool loop with thinking: two tool rounds, every call accepted, each
// signature sent back byte for byte, thinking on in every call.
func TestThinkingToolLoopReplaysSignatures(t *testing.T) {
	e := newReasoningEnv(t, providertest.Options{Script: toolRounds(2)}, retry.DefaultSettings(),
		cred("anth", "one", keyOne, ""))
	s := e.thinkingSession(t, session.RetryOverrides{})
	evs := run(t, s, "weather in Paris?")
	if last(evs).Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v (%s)", last(evs), kinds(evs))
	}
	reqs := e.fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	accepted(t, reqs)
	acct := providertest.DefaultAccount
	sig0, sig1 := signatureOf(reqs[0], acct), signatureOf(reqs[1], acct)
	if got := wireThinking(t, reqs[1]); !slices.Equal(got, []string{sig0}) {
		t.Errorf("request 1 sent thinking %q, want %q", got, sig0)
	}
	if got := wireThinking(t, reqs[2]); !slices.Equal(got, []string{sig0, sig1}) {
		t.Errorf("request 2 sent thinking %q, want %q", got, []string{sig0, sig1})
	}
	for _, r := range reqs {
		if !thinks(&r) || !bytes.Contains(r.Body, []byte(`"budget_tokens":2048`)) {
			t.Errorf("request %d without thinking: %s", r.Index, r.Body)
		}
	}
	// The thinking streamed, and the history shows it with its origin.
	var thought string
	for _, e := range only(evs, session.EventMessageUpdate) {
		thought += e.ThinkingDelta
	}
	if !strings.Contains(thought, "Round 0 of request 0") || !strings.Contains(thought, "Round 2 of request 2") {
		t.Errorf("thinking deltas = %q", thought)
	}
	entries, _, _ := s.Messages(context.Background(), 0, 100)
	b := entries[1].Message.Content[0]
	want := provider.Origin{Provider: "anth", Model: anthModel, Account: "one"}
	if b.Type != provider.BlockThinking || b.Signature != sig0 || b.Origin != want {
		t.Errorf("first answer's thinking block = %+v; want signed, origin %+v", b, want)
	}
}

// A rotation inside one account mid-loop: round-robin to key two, then a
// usage limit on key one switches to key two. Every signature is kept and
// accepted: the account made it.
func TestRotationWithinAccountKeepsThinking(t *testing.T) {
	script := toolRounds(2)
	usage := `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your usage limit for this organization."}}`
	opts := providertest.Options{
		Accounts: map[string]string{keyOne: "acme", keyTwo: "acme"},
		Script: func(r *providertest.Request) providertest.Step {
			if r.Index == 2 {
				return providertest.RawError(429, usage)
			}
			return script(r)
		},
	}
	e := newReasoningEnv(t, opts, retry.DefaultSettings(),
		cred("anth", "one", keyOne, "acme"), cred("anth", "two", keyTwo, "acme"))
	s := e.thinkingSession(t, session.RetryOverrides{})
	evs := run(t, s, "weather in Paris?")
	if last(evs).Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v (%s)", last(evs), kinds(evs))
	}
	reqs := e.fake.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	if keys := []string{keyOf(reqs[0]), keyOf(reqs[1]), keyOf(reqs[2]), keyOf(reqs[3])}; !slices.Equal(keys, []string{keyOne, keyTwo, keyOne, keyTwo}) {
		t.Fatalf("keys = %q", keys)
	}
	accepted(t, reqs, 2)
	if st := only(evs, session.EventAutoRetryStart); len(st) != 1 || st[0].ErrorClass != "usage_limit" || st[0].Delay != 0 {
		t.Fatalf("auto_retry_start = %+v", st)
	}
	if cs := only(evs, session.EventCredentialSwitched); len(cs) != 1 || cs[0].From != "one" || cs[0].To != "two" {
		t.Fatalf("credential_switched = %+v", cs)
	}
	sig0, sig1 := signatureOf(reqs[0], "acme"), signatureOf(reqs[1], "acme")
	for i, want := range [][]string{1: {sig0}, 2: {sig0, sig1}, 3: {sig0, sig1}} {
		if i == 0 {
			continue
		}
		if got := wireThinking(t, reqs[i]); !slices.Equal(got, want) {
			t.Errorf("request %d sent thinking %q, want %q", i, got, want)
		}
		if !thinks(&reqs[i]) {
			t.Errorf("request %d without thinking", i)
		}
	}
}

// A rotation to another account mid-loop: the other account's call gets
// no foreign signature and, as Anthropic requires for an open tool loop
// whose last turn has no thinking of its own, no thinking; back on the
// first account its own signature is valid again and is sent.
func TestRotationToAnotherAccountSendsNothingForeign(t *testing.T) {
	opts := providertest.Options{Accounts: map[string]string{keyOne: "alpha", keyTwo: "beta"}, Script: toolRounds(2)}
	e := newReasoningEnv(t, opts, retry.DefaultSettings(),
		cred("anth", "one", keyOne, "alpha"), cred("anth", "two", keyTwo, "beta"))
	s := e.thinkingSession(t, session.RetryOverrides{})
	evs := run(t, s, "weather in Paris?")
	if last(evs).Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v (%s)", last(evs), kinds(evs))
	}
	reqs := e.fake.Requests()
	if len(reqs) != 3 || keyOf(reqs[1]) != keyTwo || keyOf(reqs[2]) != keyOne {
		t.Fatalf("%d requests", len(reqs))
	}
	accepted(t, reqs)
	if got := wireThinking(t, reqs[1]); len(got) != 0 || bytes.Contains(reqs[1].Body, []byte(`signature`)) {
		t.Errorf("request 1 (account beta) sent thinking %q: %s", got, reqs[1].Body)
	}
	if thinks(&reqs[1]) {
		t.Errorf("request 1 asked for thinking in an open tool loop without its own")
	}
	// Back on alpha: its own signature again (beta's turn had none).
	if got, want := wireThinking(t, reqs[2]), []string{signatureOf(reqs[0], "alpha")}; !slices.Equal(got, want) {
		t.Errorf("request 2 (account alpha) sent thinking %q, want %q", got, want)
	}
	// The persisted history keeps the state: stripping is per call.
	entries, _, _ := s.Messages(context.Background(), 0, 100)
	if b := entries[1].Message.Content[0]; b.Signature == "" {
		t.Errorf("the history lost the first answer's signature: %+v", b)
	}
}

// A fallback Anthropic → OpenAI mid-loop: the OpenAI calls get no
// Anthropic signature, its thinking budget as an effort, and are accepted;
// after the primary's cooldown the next prompt goes back to Anthropic,
// which gets its own earlier reasoning again (and no OpenAI state) and
// accepts it.
func TestFallbackAndRevertReplayOnlyOwnReasoning(t *testing.T) {
	script := toolRounds(2)
	opts := providertest.Options{
		Accounts: map[string]string{keyOne: "acme", keyOAI: "org-x"},
		Script: func(r *providertest.Request) providertest.Step {
			if r.Index == 1 {
				return providertest.HTTPError(529)
			}
			return script(r)
		},
	}
	e := newReasoningEnv(t, opts, retry.DefaultSettings(), cred("anth", "one", keyOne, "acme"), cred("oai", "o", keyOAI, "org-x"))
	s := e.thinkingSession(t, session.RetryOverrides{})
	evs := run(t, s, "weather in Paris?")
	if last(evs).Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v (%s)", last(evs), kinds(evs))
	}
	reqs := e.fake.Requests()
	if len(reqs) != 4 || reqs[2].Kind != provider.KindOpenAIResponses || reqs[3].Kind != provider.KindOpenAIResponses {
		t.Fatalf("requests: %d", len(reqs))
	}
	accepted(t, reqs, 1)
	sig0 := signatureOf(reqs[0], "acme")
	for _, r := range reqs[2:] {
		if bytes.Contains(r.Body, []byte(sig0)) || bytes.Contains(r.Body, []byte(`signature`)) {
			t.Errorf("OpenAI request %d holds the Anthropic signature: %s", r.Index, r.Body)
		}
		if !bytes.Contains(r.Body, []byte(`"reasoning":{"effort":"medium"`)) {
			t.Errorf("OpenAI request %d: the budget of 2048 is not effort medium: %s", r.Index, r.Body)
		}
	}
	// OpenAI's own reasoning goes back to it.
	enc := providertest.OpenAIEncryptedContent("org-x", reasoningID(t, s, "oai/"+oaiModel))
	if got := wireThinking(t, reqs[3]); !slices.Equal(got, []string{enc}) {
		t.Errorf("request 3 sent reasoning %q, want its own %q", got, enc)
	}
	if st := s.State(); st.Model != "oai/"+oaiModel {
		t.Fatalf("model = %s", st.Model)
	}
	// What the fallback's kind does not take was mapped, and the log says so.
	if l := e.log.String(); !strings.Contains(l, "model parameters fitted to the call") || !strings.Contains(l, "params.thinking.budget_tokens: not accepted by the OpenAI Responses API") {
		t.Errorf("the log does not tell of the fitted params:\n%s", l)
	}

	// The primary's cooldown ends: the next prompt is Anthropic's again.
	e.clk.Advance(time.Hour)
	evs = run(t, s, "and tomorrow?")
	if last(evs).Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v (%s)", last(evs), kinds(evs))
	}
	if mc := only(evs, session.EventModelChange); len(mc) != 1 || mc[0].Reason != "revert" {
		t.Fatalf("model_change = %+v", mc)
	}
	reqs = e.fake.Requests()
	r := reqs[len(reqs)-1]
	if r.Kind != provider.KindAnthropic {
		t.Fatalf("last request went to %s", r.Kind)
	}
	accepted(t, reqs, 1)
	if got := wireThinking(t, r); !slices.Equal(got, []string{sig0}) {
		t.Errorf("the reverted call sent thinking %q, want the primary's own %q", got, sig0)
	}
	if bytes.Contains(r.Body, []byte(`gAAAAAB`)) || !thinks(&r) {
		t.Errorf("the reverted call: %s", r.Body)
	}
}

// reasoningID is the reasoning item id of the first thinking block model
// made in the history.
func reasoningID(t *testing.T, s *session.Session, model string) string {
	t.Helper()
	entries, _, _ := s.Messages(context.Background(), 0, 100)
	for _, e := range entries {
		for _, b := range e.Message.Content {
			if e.Message.Model == model && b.Type == provider.BlockThinking && b.ReasoningID != "" {
				return b.ReasoningID
			}
		}
	}
	t.Fatalf("%s made no reasoning item: %+v", model, entries)
	return ""
}

// The configuration says keys one and two share an account; the provider
// disagrees and refuses the signature. The session strips the state it
// sent and retries once at once, outside max_retries (0 here), with
// errorClass stale_reasoning; the call goes through.
func TestRefusedSignatureIsStrippedAndRetriedOnce(t *testing.T) {
	opts := providertest.Options{Accounts: map[string]string{keyOne: "acme", keyTwo: "elsewhere"}, Script: toolRounds(1)}
	e := newReasoningEnv(t, opts, retry.DefaultSettings(),
		cred("anth", "one", keyOne, "acme"), cred("anth", "two", keyTwo, "acme"))
	s := e.thinkingSession(t, session.RetryOverrides{MaxRetries: intp(0)})
	evs := run(t, s, "weather in Paris?")
	if last(evs).Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v (%s)", last(evs), kinds(evs))
	}
	reqs := e.fake.Requests()
	if len(reqs) != 3 || reqs[1].Step.Status != 400 || !strings.Contains(reqs[1].Step.Body, "Invalid `signature`") {
		t.Fatalf("requests: %d; second: %+v", len(reqs), reqs[len(reqs)-1].Step)
	}
	accepted(t, reqs, 1)
	st := only(evs, session.EventAutoRetryStart)
	if len(st) != 1 || st[0].ErrorClass != retry.ErrorClassStaleReasoning || st[0].Delay != 0 || st[0].Attempt != 1 || st[0].MaxAttempts != 1 {
		t.Fatalf("auto_retry_start = %+v", st)
	}
	if end := only(evs, session.EventAutoRetryEnd); len(end) != 1 || !end[0].Success {
		t.Fatalf("auto_retry_end = %+v", end)
	}
	if me := only(evs, session.EventMessageEnd); me[1].ErrorClass != retry.ErrorClassStaleReasoning {
		t.Fatalf("message_end = %+v", me[1])
	}
	// The retry sent no reasoning state (and no thinking: the tool loop's
	// turn lost its own).
	if got := wireThinking(t, reqs[2]); len(got) != 0 || thinks(&reqs[2]) {
		t.Errorf("the retry sent thinking %q: %s", got, reqs[2].Body)
	}
	// The history keeps it.
	entries, _, _ := s.Messages(context.Background(), 0, 100)
	if b := entries[1].Message.Content[0]; b.Signature == "" {
		t.Errorf("the history lost the signature: %+v", b)
	}
}

// A second refusal after the strip is an error like any other: with
// max_retries 0 the prompt fails.
func TestSecondStaleReasoningRefusalIsANormalError(t *testing.T) {
	refusal := providertest.RawError(400, providertest.AnthropicInvalidSignature(1, 0))
	opts := providertest.Options{Script: func(r *providertest.Request) providertest.Step {
		if r.Index == 0 {
			return toolRounds(1)(r)
		}
		return refusal
	}}
	e := newReasoningEnv(t, opts, retry.DefaultSettings(), cred("anth", "one", keyOne, ""))
	s := e.thinkingSession(t, session.RetryOverrides{MaxRetries: intp(0)})
	evs := run(t, s, "weather in Paris?")
	if lp := last(evs); lp.Outcome != session.OutcomeFailed || !strings.Contains(lp.Error, "Invalid `signature`") {
		t.Fatalf("prompt_end = %+v (%s)", lp, kinds(evs))
	}
	if n := len(e.fake.Requests()); n != 3 {
		t.Fatalf("%d requests, want 3 (the call, its refusal, the one retry's)", n)
	}
	st := only(evs, session.EventAutoRetryStart)
	end := only(evs, session.EventAutoRetryEnd)
	if len(st) != 1 || len(end) != 1 || end[0].Success || end[0].Attempt != 1 {
		t.Fatalf("auto_retry_start = %+v, auto_retry_end = %+v", st, end)
	}
}

// A call that failed after it streamed thinking (a stream cut after
// content: not retried) leaves nothing to replay: the next prompt's call
// sends no reasoning of the failed attempt, and the history keeps its
// thinking text for display only.
func TestFailedAttemptsThinkingIsNeverReplayed(t *testing.T) {
	think := &providertest.Answer{Thinking: []string{"Half ", "a thought"}, Text: []string{"Hello"}}
	opts := providertest.Options{Script: func(r *providertest.Request) providertest.Step {
		if r.Index == 0 {
			return providertest.Step{Kind: providertest.StepErrorEvent, After: 3, Answer: think}
		}
		return providertest.Step{Answer: &providertest.Answer{Text: []string{"ok"}}}
	}}
	e := newReasoningEnv(t, opts, retry.DefaultSettings(), cred("anth", "one", keyOne, ""))
	s := e.thinkingSession(t, session.RetryOverrides{})
	evs := run(t, s, "hi")
	if last(evs).Outcome != session.OutcomeFailed {
		t.Fatalf("prompt_end = %+v (%s)", last(evs), kinds(evs))
	}
	var thought string
	for _, e := range only(evs, session.EventMessageUpdate) {
		thought += e.ThinkingDelta
	}
	if !strings.Contains(thought, "Half") {
		t.Fatalf("the failed attempt streamed no thinking: %q", thought)
	}
	entries, _, _ := s.Messages(context.Background(), 0, 100)
	for _, b := range entries[1].Message.Content {
		if b.HasReasoningState() {
			t.Errorf("the failed entry holds reasoning state: %+v", b)
		}
	}
	if evs := run(t, s, "again"); last(evs).Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v (%s)", last(evs), kinds(evs))
	}
	reqs := e.fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if got := wireThinking(t, reqs[1]); len(got) != 0 || bytes.Contains(reqs[1].Body, []byte("Half")) {
		t.Errorf("the next call replayed the failed attempt's thinking: %s", reqs[1].Body)
	}
}
