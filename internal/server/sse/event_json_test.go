package sse

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/server/convert"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// AppendEventJSON writes what protojson writes (the same tokens) for the
// events it takes, and declines everything else: random strings (control
// characters, quotes, backslashes, every size of UTF-8, invalid bytes),
// times at every precision and at the range's ends, every event type.
func TestEventJSONMatchesProtojson(t *testing.T) {
	m := NewMarshaler()
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "Z", " ", "\"", "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x01", "\x1f", "\x7f",
		"é", "€", "😀", "\u2028", "<", ">", "&", "{", "}", ":", ",", "data: x", "id: 9",
		"plain ascii ", "ses_72vezwoigmhi2doj6h5ltl2p7m"} // runs the writer passes a word at a time
	invalid := []string{"\xff", "\xc3", "\xed\xa0\x80"}
	str := func() string {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		if rng.IntN(40) == 0 {
			b.WriteString(invalid[rng.IntN(len(invalid))])
		}
		return b.String()
	}
	times := []time.Time{
		time.Date(2026, 11, 30, 7, 1, 2, 0, time.UTC),
		time.Date(2026, 11, 30, 7, 1, 2, 5e8, time.UTC),
		time.Date(2026, 11, 30, 7, 1, 2, 120e6, time.UTC),
		time.Date(2026, 11, 30, 7, 1, 2, 123456e3, time.UTC),
		time.Date(2026, 11, 30, 7, 1, 2, 1, time.UTC),
		time.Date(2026, 11, 30, 7, 1, 2, 100, time.FixedZone("x", 3600)),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 1, time.UTC),
		time.Date(999, 9, 9, 9, 9, 9, 0, time.UTC),
		time.Date(2000, 2, 29, 10, 0, 9, 0, time.UTC),
	}
	types := []string{session.EventAgentStart, session.EventMessageStart, session.EventMessageUpdate, session.EventMessageEnd,
		session.EventAgentEnd, session.EventPromptEnd, session.EventAutoRetryStart, session.EventAutoRetryEnd,
		session.EventRetryFallbackApplied, session.EventRetryFallbackSucceeded, session.EventModelChange,
		session.EventCredentialSwitched, session.EventContextOverflow, session.EventToolCall, "unknown_type"}
	ints := []int{0, 1, -1, 7, 1 << 31, -(1 << 31), 1<<31 - 1}
	fast := map[string]int{}
	for i := range 40000 {
		e := session.Event{SessionID: str(), Seq: rng.Uint64() >> uint(rng.IntN(64)), Time: times[i%len(times)],
			Type: types[rng.IntN(len(types))], PromptID: str()}
		e.Role, e.Model, e.Credential, e.Outcome, e.Error = str(), str(), str(), str(), str()
		e.TextDelta, e.ThinkingDelta = str(), str()
		e.StopReason, e.ErrorMessage, e.Text, e.ErrorClass, e.DelaySource, e.FinalError = str(), str(), str(), str(), str(), str()
		e.From, e.To, e.Reason, e.Provider = str(), str(), str(), str()
		if rng.IntN(2) == 0 {
			e.StopDetails = str()
		}
		e.Attempt, e.MaxAttempts = ints[rng.IntN(len(ints))], ints[rng.IntN(len(ints))]
		e.Delay = time.Duration(rng.Int64N(1<<62)) * time.Duration(1-2*rng.IntN(2))
		e.Success = rng.IntN(2) == 0
		if e.Type == session.EventToolCall {
			e.ToolCall = &session.ToolCall{CallID: str(), Name: str(), Input: []byte(`{"a":1}`)}
		}
		if rng.IntN(3) == 0 {
			e.ToolCallDelta = &session.ToolCallDelta{CallID: str(), Name: str(), InputDelta: str()}
		}
		e.CacheLost = rng.IntN(2) == 0
		if rng.IntN(3) != 0 {
			n := func() int64 { return rng.Int64N(1<<62) >> uint(rng.IntN(62)) }
			e.Usage = &provider.Usage{InputTokens: n(), OutputTokens: n(), CacheReadTokens: n(), CacheWriteTokens: n(), ReasoningTokens: n()}
			e.RetryUsage = &provider.Usage{InputTokens: n()}
		}
		costs := []float64{0, 0.015411, 1e-6, 9.99e-7, 3, 123456.789, 1e21, 1e-9, 0.1 + 0.2, 7e-5}
		if rng.IntN(2) == 0 {
			e.CostUSD = &costs[rng.IntN(len(costs))]
		}
		if rng.IntN(2) == 0 {
			e.RetryCostUSD = &costs[rng.IntN(len(costs))]
		}
		pe := convert.EventToProto(&e)
		if i%7 == 0 {
			pe.Type = str() // any type string with any payload
		}
		if i%101 == 0 {
			pe.Time = nil
		}
		if i%103 == 0 {
			pe.Time = &timestamppb.Timestamp{Seconds: 1, Nanos: -1}
		}
		want, werr := m.JSONPb.Marshal(pe)
		got, ok := AppendEventJSON([]byte("prefix"), pe)
		if !strings.HasPrefix(string(got), "prefix") {
			t.Fatalf("%q: prefix lost", got)
		}
		if !ok {
			if string(got) != "prefix" {
				t.Fatalf("declined but wrote %q", got)
			}
			continue
		}
		fast[e.Type]++
		if werr != nil {
			t.Fatalf("%+v: wrote %q where protojson fails: %v", pe, got, werr)
		}
		if g, w := testkit.JSONTokens(got[len("prefix"):]), testkit.JSONTokens(want); !slices.Equal(g, w) {
			t.Fatalf("%+v:\n got %s\nwant %s", pe, got[len("prefix"):], want)
		}
		if strings.ContainsAny(string(got), "\n\r") {
			t.Fatalf("raw newline in %q", got)
		}
	}
	for _, typ := range types[:len(types)-2] {
		if fast[typ] < 500 {
			t.Errorf("%s: %d events on the fast path", typ, fast[typ])
		}
	}
	for _, typ := range []string{session.EventToolCall, "unknown_type"} {
		if fast[typ] != 0 {
			t.Errorf("%s: on the fast path", typ)
		}
	}
}

// appendJSONString quotes as protojson does, and declines what protojson
// refuses, whatever byte ends a run of plain words and wherever it falls
// in its word.
func TestJSONStringMatchesProtojson(t *testing.T) {
	odd := []string{"\"", "\\", "\n", "\x00", "\x1f", "\x7f", "é", "😀", "\u2028", "<", "\xff", "\xc3", "\xed\xa0\x80"}
	for _, lead := range []string{"", "a", "abcdefg", "abcdefgh", "abcdefghijklmnopq"} {
		for _, o := range odd {
			for _, tail := range []string{"", "x", "0123456789abcdef"} {
				checkJSONString(t, lead+o+tail)
				checkJSONString(t, lead+o+tail+o)
			}
		}
	}
}

func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "ses_72vezwoigmhi2doj6h5ltl2p7m", "tab\there and \"quotes\"", "caf\xc3\xa9 \xff", "0123456789abcde\u2028"} {
		f.Add(s)
	}
	f.Fuzz(checkJSONString)
}

func checkJSONString(t *testing.T, s string) {
	t.Helper()
	want, werr := protojson.Marshal(wrapperspb.String(s))
	got, ok := appendJSONString([]byte("x"), s)
	switch {
	case ok != (werr == nil):
		t.Fatalf("appendJSONString(%q): ok %v, protojson's error %v", s, ok, werr)
	case ok && string(got[1:]) != string(want):
		t.Fatalf("appendJSONString(%q) = %s, protojson %s", s, got[1:], want)
	case got[0] != 'x':
		t.Fatalf("appendJSONString(%q) lost what came before", s)
	}
}

// BenchmarkEventFrame: one message_update's SSE frame (without its
// delimiter), on the fast path and through protojson.
func BenchmarkEventFrame(b *testing.B) {
	m := NewMarshaler()
	e := session.Event{SessionID: "ses_0123456789abcdef", Seq: 42, Time: time.Now(), Type: session.EventMessageUpdate,
		PromptID: "prm_0123456789abcdef", TextDelta: "hello world "}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.AppendEvent(nil, convert.EventToProto(&e)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.appendJSONData(nil, convert.EventToProto(&e)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
