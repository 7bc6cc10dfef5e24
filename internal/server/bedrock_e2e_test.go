package server_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// Two AWS key pairs (the documentation's example shape): events, history
// and credential listings never carry them.
const (
	bedrockKeyOne    = "AKIAONEEXAMPLE000001:oneSecretEXAMPLEKEY0000000000000000000001"
	bedrockKeyTwo    = "AKIATWOEXAMPLE000002:twoSecretEXAMPLEKEY0000000000000000000002"
	bedrockTestModel = "anthropic.claude-sonnet-4-5-20250929-v1:0"
)

func startBedrock(t *testing.T) (*providertest.BedrockServer, *testServer) {
	t.Helper()
	fake := providertest.NewBedrockServer()
	t.Cleanup(fake.Close)
	ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 10}
providers:
  - name: aws
    kind: bedrock
    region: us-east-1
    base_url: %s
    credentials: [{id: one, api_key: %q}, {id: two, api_key: %q}]
`, fake.URL, bedrockKeyOne, bedrockKeyTwo))
	return fake, ts
}

func checkNoBedrockKey(t *testing.T, evs []*agentdv1.Event) {
	t.Helper()
	for _, e := range evs {
		var buf bytes.Buffer
		fmt.Fprint(&buf, e)
		for _, k := range []string{bedrockKeyOne, bedrockKeyTwo} {
			id, sec, _ := strings.Cut(k, ":")
			if strings.Contains(buf.String(), sec) || strings.Contains(buf.String(), id) {
				t.Fatalf("a key leaked into an event: %v", e)
			}
		}
	}
}

// A ThrottlingException answer is retried with backoff, on the same
// credential, and the retry streams the answer.
func TestBedrockThrottlingRetried(t *testing.T) {
	fake, ts := startBedrock(t)
	fake.Enqueue(providertest.Step{Kind: providertest.StepHTTPError, Status: 429, ErrorType: "ThrottlingException"},
		providertest.Step{Answer: &providertest.Answer{Text: []string{"Hello", " from Bedrock"}}})
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "aws/" + bedrockTestModel}))
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))
	checkNoBedrockKey(t, evs)
	var starts []*agentdv1.AutoRetryStart
	var text string
	for _, e := range evs {
		if st := e.GetAutoRetryStart(); st != nil {
			starts = append(starts, st)
		}
		if e.GetCredentialSwitched() != nil {
			t.Fatalf("a throttle switched credentials: %s", compact(types(evs)))
		}
		text += e.GetMessageUpdate().GetTextDelta()
	}
	if len(starts) != 1 || starts[0].GetErrorClass() != "transient" || starts[0].GetDelaySource() == "provider" ||
		starts[0].GetErrorMessage() != "429 ThrottlingException: "+providertest.BedrockTooManyRequests {
		t.Fatalf("auto_retry_start = %v (%s)", starts, compact(types(evs)))
	}
	if text != "Hello from Bedrock" || evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("answer %q, events %s", text, compact(types(evs)))
	}
	reqs := fake.Requests()
	if len(reqs) != 2 || reqs[1].Model != bedrockTestModel {
		t.Fatalf("provider saw %d requests", len(reqs))
	}
	for _, r := range reqs {
		// SigV4 with a configured key, for bedrock in the region.
		if a := r.Header.Get("Authorization"); !strings.HasPrefix(a, "AWS4-HMAC-SHA256 Credential=AKIA") || !strings.Contains(a, "/us-east-1/bedrock/aws4_request") {
			t.Fatalf("request signed with %q", a)
		}
	}
}

// "Too many tokens per day" blocks the credential until 00:00 UTC and the
// session switches to its sibling at once.
func TestBedrockDailyQuotaSwitchesCredential(t *testing.T) {
	fake, ts := startBedrock(t)
	fake.Enqueue(providertest.Step{Kind: providertest.StepHTTPError, Status: 429, ErrorType: "ThrottlingException", ErrorMessage: providertest.BedrockTooManyTokensDaily},
		providertest.Step{Answer: &providertest.Answer{Text: []string{"from two"}}})
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "aws/" + bedrockTestModel}))
	before := time.Now()
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))
	checkNoBedrockKey(t, evs)
	var switched *agentdv1.CredentialSwitched
	var start *agentdv1.AutoRetryStart
	for _, e := range evs {
		if cs := e.GetCredentialSwitched(); cs != nil {
			switched = cs
		}
		if st := e.GetAutoRetryStart(); st != nil && start == nil {
			start = st
		}
	}
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("provider saw %d requests", len(reqs))
	}
	// The first call's credential (whichever the pool picked) is blocked,
	// the second call signs with its sibling.
	first, second := "one", "two"
	if strings.Contains(reqs[0].Header.Get("Authorization"), "Credential=AKIATWOEXAMPLE000002/") {
		first, second = "two", "one"
	}
	if switched.GetFrom() != first || switched.GetTo() != second {
		t.Fatalf("credential_switched = %v (%s)", switched, compact(types(evs)))
	}
	if reqs[0].Header.Get("Authorization")[:60] == reqs[1].Header.Get("Authorization")[:60] {
		t.Fatalf("both calls signed with one key: %q", reqs[1].Header.Get("Authorization"))
	}
	if start.GetErrorClass() != "usage_limit" {
		t.Fatalf("auto_retry_start = %v", start)
	}
	if evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("events %s", compact(types(evs)))
	}
	// Blocked until the next midnight UTC (at least 30 minutes).
	u := before.UTC()
	midnight := time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC)
	if midnight.Sub(u) < 30*time.Minute {
		midnight = u.Add(30 * time.Minute)
	}
	creds := must(ts.creds.ListCredentials(ctx, &agentdv1.ListCredentialsRequest{}))
	found := false
	for _, c := range creds.GetCredentials() {
		if c.GetId() != first {
			continue
		}
		found = true
		until := c.GetBlockedUntil().AsTime()
		if c.GetStatus() == "available" || until.Before(midnight.Add(-time.Minute)) || until.After(midnight.Add(time.Minute)) {
			t.Fatalf("credential %s: %s until %v, want blocked until about %v", first, c.GetStatus(), until, midnight)
		}
		if strings.Contains(c.GetBlockReason(), "Secret") {
			t.Fatalf("block reason carries the key: %q", c.GetBlockReason())
		}
	}
	if !found {
		t.Fatalf("credentials = %v", creds)
	}
}

// An exception in the stream after content is not replayed: the turn ends
// in error with what streamed.
func TestBedrockMidStreamExceptionNotReplayed(t *testing.T) {
	for _, exc := range []string{"modelStreamErrorException", "throttlingException", "serviceUnavailableException"} {
		t.Run(exc, func(t *testing.T) {
			fake, ts := startBedrock(t)
			fake.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, ErrorType: exc, After: 1,
				Answer: &providertest.Answer{Text: []string{"partial ", "answer"}}})
			ctx := testkit.Context(t)
			sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "aws/" + bedrockTestModel}))
			evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))
			checkNoBedrockKey(t, evs)
			if got := compact(types(evs)); strings.Contains(got, "auto_retry") || strings.Contains(got, "credential_switched") {
				t.Fatalf("events: %s", got)
			}
			var end *agentdv1.MessageEnd
			for _, e := range evs {
				if me := e.GetMessageEnd(); me != nil {
					end = me
				}
			}
			if end.GetStopReason() != "error" || end.GetErrorClass() != "not_retryable" || end.GetText() != "partial " {
				t.Fatalf("message_end = %v", end)
			}
			if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "failed" {
				t.Fatalf("prompt_end = %v", pe)
			}
			if n := len(fake.Requests()); n != 1 {
				t.Fatalf("provider saw %d calls, want 1", n)
			}
		})
	}
}

// A chain from Anthropic to Bedrock: the session's tool loop started on
// Anthropic (signed thinking, a tool call, its result) continues on
// Bedrock after a 529, in Converse's format: the tool call and result
// carry over, the Anthropic signature does not.
func TestFallbackAnthropicToBedrock(t *testing.T) {
	anth := providertest.NewServer(providertest.Options{NoReasoningChecks: true})
	defer anth.Close()
	fake := providertest.NewBedrockServer()
	defer fake.Close()
	ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 10, fallback_chains: {default: [%q]}}
providers:
  - name: anth
    kind: anthropic
    base_url: %s
    credentials: [{id: a, api_key: sk-ant-api03-fallbackKEY0123456789}]
  - name: aws
    kind: bedrock
    region: us-east-1
    base_url: %s
    credentials: [{id: one, api_key: %q}]
`, "aws/"+bedrockTestModel, anth.URL, fake.URL, bedrockKeyOne))
	anth.Enqueue(providertest.Step{Answer: &providertest.Answer{Thinking: []string{"look it up"},
		Tools: []providertest.ToolCall{{ID: "toolu_01", Name: "lookup", Args: []string{`{"q":"x"}`}}}}},
		providertest.HTTPError(529))
	fake.Enqueue(providertest.Step{Answer: &providertest.Answer{Text: []string{"done ", "on Bedrock"}}})

	ctx := testkit.Context(t)
	schema, _ := structpb.NewStruct(map[string]any{"type": "object"})
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "anth/claude-sonnet-4-5",
		Tools: []*agentdv1.Tool{{Name: "lookup", InputSchema: schema}}}))
	stream := must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "find x"}))
	var evs []*agentdv1.Event
	for {
		e, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
		if tc := e.GetToolCall(); tc != nil {
			if _, err := ts.agent.SubmitToolResults(ctx, &agentdv1.SubmitToolResultsRequest{SessionId: sess.GetId(),
				Results: []*agentdv1.ToolResult{{CallId: tc.GetCallId(), Content: "found"}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkNoBedrockKey(t, evs)
	var fallback *agentdv1.RetryFallbackApplied
	var text string
	for _, e := range evs {
		if fa := e.GetRetryFallbackApplied(); fa != nil {
			fallback = fa
		}
		if me := e.GetMessageEnd(); me != nil {
			text = me.GetText()
		}
	}
	if fallback.GetTo() != "aws/"+bedrockTestModel || text != "done on Bedrock" || evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("fallback %v, answer %q, events %s", fallback, text, compact(types(evs)))
	}
	reqs := fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("Bedrock saw %d requests", len(reqs))
	}
	body := string(reqs[0].Body)
	for _, want := range []string{
		`{"toolUse":{"input":{"q":"x"},"name":"lookup","toolUseId":"toolu_01"}}`,
		`{"toolResult":{"content":[{"text":"found"}],"toolUseId":"toolu_01"}}`,
		`{"text":"find x"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the Bedrock request lacks %s: %s", want, body)
		}
	}
	if strings.Contains(body, "signature") || strings.Contains(body, "reasoningContent") {
		t.Errorf("the Anthropic reasoning state went to Bedrock: %s", body)
	}
}

// A prompt with tools on Bedrock: the model's toolUse reaches the client
// as a tool call, its result goes back as a toolResult, the answer ends
// the prompt.
func TestBedrockToolLoop(t *testing.T) {
	fake, ts := startBedrock(t)
	fake.Enqueue(providertest.Step{Answer: &providertest.Answer{Text: []string{"Let me look."},
		Tools: []providertest.ToolCall{{ID: "tooluse_A1", Name: "lookup", Args: []string{`{"q":`, `"x"}`}}}}},
		providertest.Step{Answer: &providertest.Answer{Text: []string{"It is ", "found."}}})
	ctx := testkit.Context(t)
	schema, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}})
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "aws/" + bedrockTestModel,
		Tools: []*agentdv1.Tool{{Name: "lookup", Description: "looks things up", InputSchema: schema}}}))
	stream := must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "find x"}))
	var evs []*agentdv1.Event
	for {
		e, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
		if tc := e.GetToolCall(); tc != nil {
			if tc.GetCallId() != "tooluse_A1" || tc.GetInput().GetStructValue().GetFields()["q"].GetStringValue() != "x" {
				t.Fatalf("tool_call = %v", tc)
			}
			if _, err := ts.agent.SubmitToolResults(ctx, &agentdv1.SubmitToolResultsRequest{SessionId: sess.GetId(),
				Results: []*agentdv1.ToolResult{{CallId: tc.GetCallId(), Content: "found"}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkNoBedrockKey(t, evs)
	if got := compact(types(evs)); !strings.Contains(got, "tool_call") || evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("events = %s", got)
	}
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("Bedrock saw %d requests", len(reqs))
	}
	body := string(reqs[1].Body)
	for _, want := range []string{
		`"toolSpec":{"description":"looks things up","inputSchema":{"json":`,
		`{"content":[{"text":"Let me look."},{"toolUse":{"input":{"q":"x"},"name":"lookup","toolUseId":"tooluse_A1"}}],"role":"assistant"}`,
		`{"content":[{"toolResult":{"content":[{"text":"found"}],"toolUseId":"tooluse_A1"}}],"role":"user"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the second request lacks %s: %s", want, body)
		}
	}
}
