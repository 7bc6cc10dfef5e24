package openai

import (
	"encoding/json"
	"testing"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// sent is what one recorded Responses request asked for.
type sent struct {
	PreviousResponseID string      `json:"previous_response_id"`
	Store              bool        `json:"store"`
	Input              []inputItem `json:"input"`
}

func sentAt(t *testing.T, s *providertest.Server, i int) sent {
	t.Helper()
	reqs, err := s.WaitRequests(testkit.Context(t), i+1)
	if err != nil {
		t.Fatal(err)
	}
	var b sent
	if err := json.Unmarshal(reqs[i].Body, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestChainingAndStaleReplay(t *testing.T) {
	s := newServer(t, providertest.Options{})
	c := newClient(t, Options{BaseURL: s.URL, ChainResponses: true})

	// 1: the whole context, stored.
	msgs := []provider.Message{userMsg("one")}
	res, _ := streamT(t, c, request(msgs...))
	if res.Message.StopReason != provider.StopEnd {
		t.Fatalf("call 1: %+v", res)
	}
	if b := sentAt(t, s, 0); b.PreviousResponseID != "" || !b.Store || len(b.Input) != 1 {
		t.Errorf("call 1 sent %+v", b)
	}

	// 2: the session appended the answer and a prompt: only the prompt goes,
	// chained to response 1.
	msgs = append(msgs, res.Message, userMsg("two"))
	res, _ = streamT(t, c, request(msgs...))
	if res.Message.StopReason != provider.StopEnd || res.ResetState {
		t.Fatalf("call 2: %+v", res)
	}
	if b := sentAt(t, s, 1); b.PreviousResponseID != "resp_test0000" || len(b.Input) != 1 || b.Input[0].Content != "two" {
		t.Errorf("call 2 sent %+v", b)
	}

	// 3: the server lost response 2: the state is dropped, ResetState set.
	msgs = append(msgs, res.Message, userMsg("three"))
	s.Enqueue(providertest.RawError(400, providertest.OpenAIPreviousResponseNotFound("resp_test0001")))
	res, _ = streamT(t, c, request(msgs...))
	if b := sentAt(t, s, 2); b.PreviousResponseID != "resp_test0001" || len(b.Input) != 1 {
		t.Errorf("call 3 sent %+v", b)
	}
	if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || !res.ResetState || f == nil ||
		f.Code != "previous_response_not_found" || m.ErrorMessage != "400 invalid_request_error: Previous response with id 'resp_test0001' not found." {
		t.Errorf("call 3: %+v", res)
	}

	// 4: the retry resends everything, unchained.
	res, _ = streamT(t, c, request(msgs...))
	if b := sentAt(t, s, 3); b.PreviousResponseID != "" || len(b.Input) != 5 {
		t.Errorf("call 4 sent %+v", b)
	}

	// 5: an in-stream stale error (nested shape) resets too.
	msgs = append(msgs, res.Message, userMsg("four"))
	s.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, ErrorType: "invalid_request_error",
		ErrorCode: "previous_response_not_found", ErrorMessage: "Previous response with id 'resp_test0003' not found."})
	res, _ = streamT(t, c, request(msgs...))
	if b := sentAt(t, s, 4); b.PreviousResponseID != "resp_test0003" {
		t.Errorf("call 5 sent %+v", b)
	}
	if !res.ResetState || res.Failure == nil || res.Failure.Status != 200 {
		t.Errorf("call 5: %+v", res)
	}
	if _, ok := c.chain.get("s1"); ok {
		t.Errorf("the session's state survived a stale replay")
	}

	// 6: "Item with id … not found" (store=false replay) resets as well.
	s.Enqueue(providertest.RawError(404, providertest.OpenAIItemNotFound("rs_missing")))
	res, _ = streamT(t, c, request(msgs...))
	if !res.ResetState || res.Failure == nil || res.Failure.Status != 404 {
		t.Errorf("call 6: %+v", res)
	}
}

func TestChainingFallsBackToTheWholeContext(t *testing.T) {
	s := newServer(t, providertest.Options{})
	c := newClient(t, Options{BaseURL: s.URL, ChainResponses: true, ChainCacheSize: 2})

	msgs := []provider.Message{userMsg("one")}
	res, _ := streamT(t, c, request(msgs...))

	// The context changed underneath (an earlier message differs): whole.
	changed := []provider.Message{userMsg("ONE"), res.Message, userMsg("two")}
	streamT(t, c, request(changed...))
	if b := sentAt(t, s, 1); b.PreviousResponseID != "" || len(b.Input) != 3 {
		t.Errorf("changed context sent %+v", b)
	}

	// Another model: whole.
	req := request(changed...)
	req.Model = "gpt-5-mini"
	res2 := c.Stream(testkit.Context(t), req, nil)
	if b := sentAt(t, s, 2); b.PreviousResponseID != "" {
		t.Errorf("another model sent %+v", b)
	}

	// Forget: whole.
	c.Forget("s1")
	streamT(t, c, request(append(changed, res2.Message, userMsg("x"))...))
	if b := sentAt(t, s, 3); b.PreviousResponseID != "" {
		t.Errorf("after Forget sent %+v", b)
	}

	// The cache keeps the most recent sessions only.
	for _, id := range []string{"a", "b", "c"} {
		r := request(userMsg("hi"))
		r.SessionID = id
		c.Stream(testkit.Context(t), r, nil)
	}
	if n := c.chain.len(); n != 2 {
		t.Errorf("cache holds %d sessions, want 2", n)
	}
	if _, ok := c.chain.get("a"); ok {
		t.Errorf("the least recently used session was kept")
	}

	// Chat and unchained clients never chain.
	plain := newClient(t, Options{BaseURL: s.URL})
	plain.Stream(testkit.Context(t), request(userMsg("one")), nil)
	if b := sentAt(t, s, 7); b.Store || b.PreviousResponseID != "" || plain.chain != nil {
		t.Errorf("unchained sent %+v", b)
	}
	plain.Forget("s1") // no-op
}

func TestChainingToolTurn(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Answer: &providertest.Answer{Tools: []providertest.ToolCall{{ID: "call_9", Name: "get", Args: []string{`{}`}}}}})
	c := newClient(t, Options{BaseURL: s.URL, ChainResponses: true})
	msgs := []provider.Message{userMsg("weather?")}
	res, _ := streamT(t, c, request(msgs...))
	if res.Message.StopReason != provider.StopToolUse {
		t.Fatalf("call 1: %+v", res)
	}
	msgs = append(msgs, res.Message, provider.Message{Role: provider.RoleTool, Content: []provider.Block{
		{Type: provider.BlockToolResult, ToolCallID: "call_9", Text: "sunny"},
	}})
	streamT(t, c, request(msgs...))
	b := sentAt(t, s, 1)
	if b.PreviousResponseID != "resp_test0000" || len(b.Input) != 1 || b.Input[0].Type != "function_call_output" || b.Input[0].CallID != "call_9" {
		t.Errorf("tool turn sent %+v", b)
	}
}
