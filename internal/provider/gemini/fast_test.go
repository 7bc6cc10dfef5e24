package gemini

import (
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/wire"
	"github.com/agentd/agentd/internal/provider/providertest"
)

// textChunk is a typical chunk, as the Gemini API streams it.
const textChunk = `{"candidates": [{"content": {"parts": [{"text": "Hello, world"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 1,"totalTokenCount": 9,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 8}]},"modelVersion": "gemini-2.5-flash","responseId": "mUSYaPzYCYGS2tIPtcfRkAg"}`

// seeds are chunks the fast path reads (the first accepted of them) and
// chunks it must decline or get exactly right.
var seeds = []string{
	textChunk,
	`{"candidates": [{"content": {"parts": [{"text": "line\nbreak \"q\" caf\u00e9 \ud83d\ude00 \ud800"}],"role": "model"},"index": 0}]}`,
	`{"candidates": [{"content": {"parts": [{"text": "Let me think","thought": true}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 0,"thoughtsTokenCount": 3}}`,
	`{"candidates": [{"content": {"parts": [{"text": "Hi","thoughtSignature": "CiQB0e2Kb0"}],"role": "model"},"index": 0}]}`,
	`{"candidates": [{"content": {"parts": [{"text": ""}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 2,"cachedContentTokenCount": 4,"toolUsePromptTokenCount": 1}}`,
	`{"candidates": [{"content": {"parts": [{"text": "a"},{"text": "b","thought": false}]},"safetyRatings": [{"category": "HARM_CATEGORY_HARASSMENT","probability": "NEGLIGIBLE"}]}]}`,
	`{"candidates": [{"content": {"parts": [],"role": "user"},"finishReason": "SAFETY","finishMessage": "blocked"}]}`,
	`{"candidates": []}`,
	// Declined, or not such a chunk.
	`{"candidates": [{"content": {"parts": [{"functionCall": {"name": "f","args": {}}}],"role": "model"}}]}`,
	`{"candidates": [{"content": {}}],"usageMetadata": null}`,
	`{"candidates": [{"content": {"parts": [{"text": null}]}}]}`,
	`{"candidates": [{"content": {"parts": [{"text": "a","thought": null}]}}]}`,
	`{"candidates": [{"content": {"parts": [{"text": "a"}]}},{"content": {}}]}`,
	`{"candidates": [{"content": {"parts": [{"TEXT": "a"}]}}]}`,
	`{"candidates": [{"content": {"parts": [{"text": "a","text": "b"}]}}]}`,
	`{"candidates": [{"content": {"parts": [{"text": "a"}]}}],"usageMetadata": {"promptTokenCount": 1.5}}`,
	`{"candidates": [{"content": {"parts": [{"text": "a"}]}}],"responseId": "r\u0031"}`,
	`{"promptFeedback": {"blockReason": "SAFETY"}}`,
	`{"error": {"code": 503,"message": "The model is overloaded.","status": "UNAVAILABLE"}}`,
	`{"candidates": [{"content": {"parts": [{"text": "a"}]}}]`,
	`[{"candidates": []}]`,
}

const accepted = 8

func checkFast(t *testing.T, data []byte) bool {
	t.Helper()
	var b chunkBuf
	var got chunk
	if !b.decode(data, &got) {
		return false
	}
	want, err := decodeChunk(data)
	if err != nil {
		t.Fatalf("fast path accepted %q; json.Unmarshal: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fast path decoded %q as\n%+v\njson.Unmarshal as\n%+v", data, got, want)
	}
	return true
}

func TestFastChunk(t *testing.T) {
	for i, s := range seeds {
		if got := checkFast(t, []byte(s)); got != (i < accepted) {
			t.Errorf("fast path on %s: accepted %v, want %v", s, got, i < accepted)
		}
	}
}

// TestFastChunkReusesItsMemory checks that a chunk decoded after another
// one has nothing of the one before.
func TestFastChunkReusesItsMemory(t *testing.T) {
	var b chunkBuf
	for _, s := range []string{seeds[5], seeds[2], seeds[0], seeds[1], seeds[7]} {
		var got chunk
		if !b.decode([]byte(s), &got) {
			t.Fatalf("declined %s", s)
		}
		if want, _ := decodeChunk([]byte(s)); !reflect.DeepEqual(got, want) {
			t.Errorf("decoded %s as %+v, want %+v", s, got, want)
		}
	}
}

// TestFastChunkTakesTheFakesChunks checks that the fast path takes every
// chunk of text or thoughts the fake provider streams.
func TestFastChunkTakesTheFakesChunks(t *testing.T) {
	a := &providertest.Answer{
		Thinking: []string{"Let me ", "think"},
		Text:     []string{"Hello", ", \"world\"\n", "caf\u00e9 😀"},
		Tools:    []providertest.ToolCall{{Name: "get_weather", Args: []string{`{"location": `, `"Paris"}`}}},
	}
	n := 0
	for line := range strings.SplitSeq(providertest.Frames(provider.KindGemini, "gemini-2.5-flash", a), "\n") {
		data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\r"), "data: ")
		if !ok {
			continue
		}
		want := !strings.Contains(data, "functionCall")
		if got := checkFast(t, []byte(data)); got != want {
			t.Errorf("fast path on %s: accepted %v, want %v", data, got, want)
		}
		if want {
			n++
		}
	}
	if n < 6 {
		t.Errorf("%d chunks taken, want at least 6", n)
	}
}

func FuzzFastChunk(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFast(t, data) })
}

// TestHandleDeltaAllocations bounds the allocations of a text chunk's
// Handle: the text's string, and nothing else (the block's text buffer
// grows now and then, less than once per delta on average; the response
// id, the same in every chunk, is not copied anew).
func TestHandleDeltaAllocations(t *testing.T) {
	s := &stream{a: wire.NewAcc("m", "secret", nil)}
	ev := wire.Event{Data: []byte(textChunk)}
	s.Handle(nil, ev) // the first chunk starts the block and keeps the id
	n := testing.AllocsPerRun(200, func() {
		if _, err := s.Handle(nil, ev); err != nil {
			t.Fatal(err)
		}
	})
	if n > 1 {
		t.Errorf("Handle of a text chunk: %v allocations, want at most 1", n)
	}
	var b chunkBuf
	var ch chunk
	b.decode(ev.Data, &ch)
	if n := testing.AllocsPerRun(200, func() { ch = chunk{}; b.decode(ev.Data, &ch) }); n > 1 {
		t.Errorf("fast path of a text chunk: %v allocations, want at most 1 (the text)", n)
	}
}

// BenchmarkHandleDelta compares the decode of a typical text chunk by
// json.Unmarshal (before) and by the fast path (now), and Handle as a
// whole.
func BenchmarkHandleDelta(b *testing.B) {
	data := []byte(textChunk)
	b.Run("decode=reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeChunk(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode=fast", func(b *testing.B) {
		b.ReportAllocs()
		var buf chunkBuf
		for b.Loop() {
			var ch chunk
			if !buf.decode(data, &ch) {
				b.Fatal("declined")
			}
		}
	})
	b.Run("handle", func(b *testing.B) {
		b.ReportAllocs()
		ev := wire.Event{Data: data}
		var s *stream
		for i := 0; b.Loop(); i++ {
			if i%64 == 0 { // a fresh message now and then: Acc's text grows
				s = &stream{a: wire.NewAcc("m", "secret", nil)}
			}
			if _, err := s.Handle(nil, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
