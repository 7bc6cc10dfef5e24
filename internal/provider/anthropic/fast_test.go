package anthropic

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/wire"
	"github.com/agentd/agentd/internal/provider/providertest"
)

// textDelta is a typical frame: the documented stream's text delta.
const textDelta = `{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello, world"}}`

// fastSeeds are frames the fast path reads (real ones, then variations)
// and frames it must decline or get exactly right.
var fastSeeds = []string{
	textDelta,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "line\nbreak \"quoted\" caf\u00e9 \ud83d\ude00"}}`,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me think"}}`,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}`,
	`{"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"location\": \"San Fra"}}`,
	`{"type":"content_block_delta","index":12,"delta":{"type":"text_delta","text":"compact"}}`,
	`{"delta": {"text": "reordered", "type": "text_delta"}, "index": 2, "type": "content_block_delta"}`,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x", "extra": [1, {"a": null}]}, "obfuscation": "abc"}`,
	"{\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"bad \xff utf8 \\ud800\"}}",
	// The other events of a stream.
	`{"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 12, "output_tokens": 1, "service_tier": "standard", "server_tool_use": {"web_search_requests": 0}}}}`,
	`{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}`,
	`{"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {}}}`,
	`{"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}`,
	`{"type": "content_block_start", "index": 2, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}}`,
	`{"type": "content_block_stop", "index": 0}`,
	`{"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}`,
	`{"type": "message_delta", "delta": {"stop_reason": null}, "usage": {"input_tokens": 3, "output_tokens": 15, "cache_read_input_tokens": 0}}`,
	`{"type": "message_stop"}`,
	`{"type": "ping"}`,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}, "usage": {}}`,
	// Declined.
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": null}}`,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "TEXT": "x"}}`,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a", "text": "b"}}`,
	`{"type": "content_block_delta", "index": 1.0, "delta": {"type": "text_delta", "text": "x"}}`,
	`{"type": "content_block_delta", "index": "0", "delta": {"type": "text_delta", "text": "x"}}`,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": {}}}`,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}} trailing`,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"},}`,
	`{"typ\u0065": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}`,
	`{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x\`,
	`{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`,
	`{"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": {"type": "refusal"}}}`,
	`{"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1.5}}`,
	`{"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": null}`,
	`{"type": "message_start", "message": {"usage": {"Input_Tokens": 3}}}`,
	`{"type": "message_start", "message": null}`,
	`{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": null}}`,
	`{"type": "content_block_stop", "index": null}`,
	`{"type": "unknown_future_event"}`,
	`[]`, `null`, ``,
}

// checkFast asserts that fastEvent either declines data or decodes it
// exactly as json.Unmarshal does; it reports whether it accepted.
func checkFast(t *testing.T, data []byte) bool {
	t.Helper()
	var got event
	if !fastEvent(data, &got) {
		return false
	}
	var want event
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("fast path accepted %q; json.Unmarshal: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fast path decoded %q as\n%+v\njson.Unmarshal as\n%+v", data, got, want)
	}
	return true
}

func TestFastDelta(t *testing.T) {
	accept := map[string]bool{}
	for _, s := range fastSeeds[:20] {
		accept[s] = true
	}
	for _, s := range fastSeeds {
		if got := checkFast(t, []byte(s)); got != accept[s] {
			t.Errorf("fast path on %s: accepted %v, want %v", s, got, accept[s])
		}
	}
}

// TestFastEventTakesTheFakesEvents checks that every event the fake
// provider streams (the documented format) takes the fast path.
func TestFastEventTakesTheFakesEvents(t *testing.T) {
	a := &providertest.Answer{
		Thinking: []string{"Let me ", "think"},
		Text:     []string{"Hello", ", \"world\"\n", "caf\u00e9 😀"},
		Tools:    []providertest.ToolCall{{Name: "get_weather", Args: []string{`{"location": `, `"Paris"}`}}},
	}
	n := 0
	for _, data := range dataFrames(providertest.Frames(provider.KindAnthropic, "claude-sonnet-4-5", a)) {
		if !checkFast(t, data) {
			t.Errorf("fast path declined %s", data)
		}
		n++
	}
	if n < 14 {
		t.Errorf("%d frames, want at least 14", n)
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

// FuzzFastEvent: for any input the fast path declines or gives exactly
// json.Unmarshal's event.
func FuzzFastEvent(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFast(t, data) })
}

// TestHandleDeltaAllocations bounds the allocations of a text delta's
// Handle: the text's string, and nothing else (the block's text buffer
// grows now and then, less than once per delta on average).
func TestHandleDeltaAllocations(t *testing.T) {
	s := &stream{a: wire.NewAcc("m", "secret", nil), started: true}
	ev := wire.Event{Type: "content_block_delta", Data: []byte(textDelta)}
	n := testing.AllocsPerRun(200, func() {
		if _, err := s.Handle(nil, ev); err != nil {
			t.Fatal(err)
		}
	})
	if n > 1 {
		t.Errorf("Handle of a text delta: %v allocations, want at most 1", n)
	}
	var e event
	if n := testing.AllocsPerRun(200, func() { e = event{}; fastEvent(ev.Data, &e) }); n > 1 {
		t.Errorf("fastEvent of a text delta: %v allocations, want at most 1 (the text)", n)
	}
}

// BenchmarkHandleDelta compares the decode of a typical text delta by
// json.Unmarshal (before), by a walk of encoding/json's tokens and by the
// fast path (now), and Handle as a whole.
func BenchmarkHandleDelta(b *testing.B) {
	data := []byte(textDelta)
	b.Run("decode=reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeEvent(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	// encoding/json's Decoder.Token, only walking the tokens (less than a
	// decode: nothing extracted): the alternative to a scanner of our own.
	b.Run("decode=tokens", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d := json.NewDecoder(bytes.NewReader(data))
			for {
				if _, err := d.Token(); err != nil {
					break
				}
			}
		}
	})
	b.Run("decode=fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e event
			if !fastEvent(data, &e) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("handle", func(b *testing.B) {
		b.ReportAllocs()
		ev := wire.Event{Type: "content_block_delta", Data: data}
		var s *stream
		for i := 0; b.Loop(); i++ {
			if i%64 == 0 { // a fresh message now and then: Acc's text grows
				s = &stream{a: wire.NewAcc("m", "secret", nil), started: true}
			}
			if _, err := s.Handle(nil, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeStream decodes every event of a whole stream (the fake
// provider's answer of a text, a thinking block and a tool call): with
// json.Unmarshal for each, and with the fast path (json.Unmarshal for what
// it declines).
func BenchmarkDecodeStream(b *testing.B) {
	a := &providertest.Answer{
		Thinking: []string{"Let me ", "think"},
		Text:     []string{"Hello", ", world", "!"},
		Tools:    []providertest.ToolCall{{Name: "get_weather", Args: []string{`{"location": `, `"Paris"}`}}},
	}
	frames := dataFrames(providertest.Frames(provider.KindAnthropic, "claude-sonnet-4-5", a))
	b.Run("decode=json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, data := range frames {
				if _, err := decodeEvent(data); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("decode=fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, data := range frames {
				var e event
				if !fastEvent(data, &e) {
					if _, err := decodeEvent(data); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	})
}
