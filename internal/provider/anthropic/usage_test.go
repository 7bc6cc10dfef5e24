package anthropic

import (
	"testing"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
)

// Anthropic counts input, cache creation and cache reads apart: agentd
// keeps them apart (input_tokens is only the uncached input).
func TestUsageCacheFields(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Answer: &providertest.Answer{
		Text: []string{"Hello", "!"}, InputTokens: 12, CacheWriteTokens: 1800, CacheReadTokens: 24000, OutputTokens: 95,
	}})
	c := newClient(t, Options{BaseURL: s.URL})
	res, _ := streamT(t, c, request())
	want := provider.Usage{InputTokens: 12, CacheWriteTokens: 1800, CacheReadTokens: 24000, OutputTokens: 95}
	if res.Usage != want {
		t.Errorf("usage = %+v, want %+v", res.Usage, want)
	}
}

// message_delta may repeat the input-side counts (the API does, cumulative):
// they replace message_start's, output included.
func TestUsageMessageDeltaCounts(t *testing.T) {
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":7,\"cache_creation_input_tokens\":300,\"cache_read_input_tokens\":5000,\"output_tokens\":42}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepHTTPError, Status: 200, ContentType: "text/event-stream", Body: stream})
	c := newClient(t, Options{BaseURL: s.URL})
	res, _ := streamT(t, c, request())
	want := provider.Usage{InputTokens: 7, CacheWriteTokens: 300, CacheReadTokens: 5000, OutputTokens: 42}
	if res.Message.StopReason != provider.StopEnd || res.Usage != want {
		t.Errorf("stop %q usage = %+v, want stop and %+v", res.Message.StopReason, res.Usage, want)
	}
}

// An overloaded error right after message_start (no observable output)
// still reports the input it was billed.
func TestUsageOfErrorAfterStart(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent,
		Answer: &providertest.Answer{Text: []string{"x"}, InputTokens: 30, CacheReadTokens: 900}})
	c := newClient(t, Options{BaseURL: s.URL})
	res, _ := streamT(t, c, request())
	if res.Message.StopReason != provider.StopError || res.Message.HasObservableOutput() {
		t.Fatalf("result %+v, want an error without output", res.Message)
	}
	if want := (provider.Usage{InputTokens: 30, CacheReadTokens: 900, OutputTokens: 1}); res.Usage != want {
		t.Errorf("usage = %+v, want %+v", res.Usage, want)
	}
}
