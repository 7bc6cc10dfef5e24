package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/wire"
	"github.com/agentd/agentd/internal/provider/providertest"
)

// Typical frames: a text chunk of each API as OpenAI sends it.
const (
	chatText      = `{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Hello, world"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"k2J"}`
	responsesText = `{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","output_index":0,"content_index":0,"delta":"Hello, world","logprobs":[],"obfuscation":"k2J"}`
)

// chatSeeds are chunks the fast path reads (the first chatAccepted of
// them) and chunks it must decline or get exactly right.
var chatSeeds = []string{
	chatText,
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"content":"line\nbreak \"q\" caf\u00e9 \ud83d\ude00 \ud800"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"Let me think"},"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning":"OpenRouter's way"}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"location\":"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}},{"index":1,"id":"call_2","function":{"name":"b","arguments":"{}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`,
	`{"choices":[]}`,
	` { "choices" : [ { "delta" : { "content" : null , "tool_calls" : null } } ] } `,
	`{"choices":[{"delta":{"tool_calls":[]}}]}`,
	// Declined, or not such a chunk.
	`{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}`,
	`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`,
	`{"error":{"message":"boom","type":"server_error"}}`,
	`{"choices":[{"delta":{"content":"x"}}],"error":null}`,
	`{"choices":[{"delta":{"Content":"x"}}]}`,
	`{"choices":[{"delta":{"content":"x","content":"y"}}]}`,
	`{"choices":[{"delta":null}]}`,
	`{"choices":null}`,
	`{"choices":[{"delta":{"content":7}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":-1e2}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":null}]}}]}`,
	`{"choices":[{"delta":{"content":"x"}}]}x`,
	`{"model":"m"}`,
	`[DONE]`, ``,
}

const chatAccepted = 12

func checkChatFast(t *testing.T, data []byte) bool {
	t.Helper()
	var b chatBuf
	var got chatChunk
	if !b.decode(data, &got) {
		return false
	}
	want, err := decodeChatChunk(data)
	if err != nil {
		t.Fatalf("fast path accepted %q; json.Unmarshal: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fast path decoded %q as\n%+v\njson.Unmarshal as\n%+v", data, got, want)
	}
	return true
}

func TestFastChatChunk(t *testing.T) {
	for i, s := range chatSeeds {
		if got := checkChatFast(t, []byte(s)); got != (i < chatAccepted) {
			t.Errorf("fast path on %s: accepted %v, want %v", s, got, i < chatAccepted)
		}
	}
}

// TestFastChatChunkReusesItsSlices checks that a chunk decoded after
// another one with tool calls has nothing of the one before.
func TestFastChatChunkReusesItsSlices(t *testing.T) {
	var b chatBuf
	for _, s := range []string{chatSeeds[7], chatSeeds[6], chatSeeds[0], chatSeeds[9]} {
		var got chatChunk
		if !b.decode([]byte(s), &got) {
			t.Fatalf("declined %s", s)
		}
		if want, _ := decodeChatChunk([]byte(s)); !reflect.DeepEqual(got, want) {
			t.Errorf("decoded %s as %+v, want %+v", s, got, want)
		}
	}
}

// responsesSeeds are events the fast path reads (the first
// responsesAccepted of them) and events it must decline or get right.
var responsesSeeds = []string{
	responsesText,
	`{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":2,"delta":"line\nbreak \"q\" \u00e9 \ud83d\ude00 \udc00"}`,
	`{"type":"response.reasoning_summary_text.delta","sequence_number":3,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"**Thinking**"}`,
	`{"type":"response.reasoning_text.delta","item_id":"rs_1","output_index":0,"content_index":0,"delta":"raw"}`,
	`{"type":"response.function_call_arguments.delta","sequence_number":7,"item_id":"fc_1","output_index":1,"delta":"{\"location\":"}`,
	`{"type":"response.refusal.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"I can't"}`,
	`{"delta":"reordered","output_index":0,"type":"response.output_text.delta"}`,
	`{"type":"response.output_text.delta","output_index":3,"content_index":0}`,
	// Declined, or not a delta.
	`{"type":"response.output_text.delta","item_id":"msg_1","delta":null}`,
	`{"type":"response.output_text.delta","item_id":"msg_1","delta":7}`,
	`{"type":"response.output_text.delta","item_id":"m\u0073g","delta":"x"}`,
	`{"type":"response.output_text.delta","item_id":"msg_1","delta":"x","Delta":"y"}`,
	`{"type":"response.output_text.delta","item_id":"msg_1","delta":"x","response":null}`,
	`{"type":"response.output_text.done","item_id":"msg_1","output_index":0,"content_index":0,"text":"Hello","logprobs":[]}`,
	`{"type":"response.function_call_arguments.done","item_id":"fc_1","output_index":1,"arguments":"{}"}`,
	`{"type":"response.completed","response":{"id":"resp_1","status":"completed"}}`,
	`{"type":"error","code":"server_error","message":"boom","param":null}`,
	`{"delta":"no type"}`,
	`{"type":"response.output_text.delta","content_index":0.5,"delta":"x"}`,
	`{"type":"response.output_text.delta","delta":"x"`,
	``,
}

const responsesAccepted = 8

func checkResponsesFast(t *testing.T, data []byte) bool {
	t.Helper()
	var d responsesDelta
	if !fastResponsesDelta(data, &d) {
		return false
	}
	e, err := decodeResponsesEvent(data)
	if err != nil {
		t.Fatalf("fast path accepted %q; json.Unmarshal: %v", data, err)
	}
	want := responsesEvent{Type: d.Type, ItemID: string(d.ItemID), OutputIndex: d.OutputIndex,
		ContentIndex: d.ContentIndex, SummaryIndex: d.SummaryIndex, Delta: e.Delta}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("fast path decoded %q as\n%+v\njson.Unmarshal as\n%+v", data, want, e)
	}
	var delta string // what Handle makes of e.Delta
	_ = json.Unmarshal(e.Delta, &delta)
	if delta != d.Delta {
		t.Fatalf("fast path decoded the delta of %q as %q, json.Unmarshal as %q", data, d.Delta, delta)
	}
	return true
}

func TestFastResponsesDelta(t *testing.T) {
	for i, s := range responsesSeeds {
		if got := checkResponsesFast(t, []byte(s)); got != (i < responsesAccepted) {
			t.Errorf("fast path on %s: accepted %v, want %v", s, got, i < responsesAccepted)
		}
	}
}

// fakeAnswer has every kind of delta the fakes stream.
func fakeAnswer() *providertest.Answer {
	return &providertest.Answer{
		Thinking: []string{"Let me ", "think"},
		Text:     []string{"Hello", ", \"world\"\n", "caf\u00e9 😀"},
		Tools:    []providertest.ToolCall{{Name: "get_weather", Args: []string{`{"location": `, `"Paris"}`}}},
	}
}

// dataFrames is the data: payloads of an SSE stream.
func dataFrames(stream string) [][]byte {
	var out [][]byte
	for line := range strings.SplitSeq(stream, "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, []byte(data))
		}
	}
	return out
}

// TestFastPathTakesTheFakesDeltas checks that the fast paths take every
// delta frame the fake provider streams, and every chunk of a Chat
// Completions stream but its end.
func TestFastPathTakesTheFakesDeltas(t *testing.T) {
	n := 0
	for _, data := range dataFrames(providertest.Frames(provider.KindOpenAIChat, "gpt-4.1", fakeAnswer())) {
		want := string(data) != "[DONE]"
		if got := checkChatFast(t, data); got != want {
			t.Errorf("chat fast path on %s: accepted %v, want %v", data, got, want)
		}
		n++
	}
	for _, data := range dataFrames(providertest.Frames(provider.KindOpenAIResponses, "gpt-4.1", fakeAnswer())) {
		want := strings.Contains(string(data), `.delta"`)
		if got := checkResponsesFast(t, data); got != want {
			t.Errorf("responses fast path on %s: accepted %v, want %v", data, got, want)
		}
		if want {
			n++
		}
	}
	if n < 14 {
		t.Errorf("%d frames, want at least 14", n)
	}
}

func FuzzFastChatChunk(f *testing.F) {
	for _, s := range chatSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkChatFast(t, data) })
}

func FuzzFastResponsesDelta(f *testing.F) {
	for _, s := range responsesSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkResponsesFast(t, data) })
}

// TestHandleDeltaAllocations bounds the allocations of a text frame's
// Handle: the text's string, and nothing else (the block's text buffer
// grows now and then, less than once per delta on average).
func TestHandleDeltaAllocations(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    wire.Handler
		ev   wire.Event
	}{
		{"chat", &chatStream{a: wire.NewAcc("m", "secret", nil)}, wire.Event{Data: []byte(chatText)}},
		{"responses", &responsesStream{a: wire.NewAcc("m", "secret", nil)},
			wire.Event{Type: "response.output_text.delta", Data: []byte(responsesText)}},
	} {
		n := testing.AllocsPerRun(200, func() {
			if _, err := tc.h.Handle(nil, tc.ev); err != nil {
				t.Fatal(err)
			}
		})
		if n > 1 {
			t.Errorf("%s: Handle of a text frame: %v allocations, want at most 1", tc.name, n)
		}
	}
	var b chatBuf
	chat, resp := []byte(chatText), []byte(responsesText)
	if n := testing.AllocsPerRun(200, func() { var ch chatChunk; b.decode(chat, &ch) }); n > 1 {
		t.Errorf("chat fast path: %v allocations, want at most 1 (the text)", n)
	}
	if n := testing.AllocsPerRun(200, func() { var d responsesDelta; fastResponsesDelta(resp, &d) }); n > 1 {
		t.Errorf("responses fast path: %v allocations, want at most 1 (the text)", n)
	}
}

// BenchmarkHandleDelta compares the decode of a typical text frame by
// json.Unmarshal (before: for Responses, the event and then its delta) and
// by the fast path (now), and Handle as a whole.
func BenchmarkHandleDelta(b *testing.B) {
	chat, resp := []byte(chatText), []byte(responsesText)
	b.Run("api=chat/decode=reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeChatChunk(chat); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("api=chat/decode=fast", func(b *testing.B) {
		b.ReportAllocs()
		var buf chatBuf
		for b.Loop() {
			var ch chatChunk
			if !buf.decode(chat, &ch) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("api=responses/decode=reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e, err := decodeResponsesEvent(resp)
			if err != nil {
				b.Fatal(err)
			}
			var delta string
			_ = json.Unmarshal(e.Delta, &delta)
		}
	})
	b.Run("api=responses/decode=fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var d responsesDelta
			if !fastResponsesDelta(resp, &d) {
				b.Fatal("declined")
			}
		}
	})
	for _, api := range []string{"chat", "responses"} {
		b.Run("api="+api+"/handle", func(b *testing.B) {
			b.ReportAllocs()
			var h wire.Handler
			ev := wire.Event{Data: chat}
			if api == "responses" {
				ev = wire.Event{Type: "response.output_text.delta", Data: resp}
			}
			for i := 0; b.Loop(); i++ {
				if i%64 == 0 { // a fresh message now and then: Acc's text grows
					a := wire.NewAcc("m", "secret", nil)
					h = &chatStream{a: a}
					if api == "responses" {
						h = &responsesStream{a: a}
					}
				}
				if _, err := h.Handle(nil, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
