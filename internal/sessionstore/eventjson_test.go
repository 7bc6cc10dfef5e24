package sessionstore

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/session"
)

// everyField is an event with every field set (SessionID and Seq aside,
// which a stored entry leaves to its key and id), each to a value of its
// own: a field added to session.Event and not to appendStoredEvent fails
// the tests below.
func everyField(t testing.TB) session.Event {
	t.Helper()
	var e session.Event
	v := reflect.ValueOf(&e).Elem()
	for i := 0; i < v.NumField(); i++ {
		f, name := v.Field(i), v.Type().Field(i).Name
		if name == "SessionID" || name == "Seq" {
			continue
		}
		switch f.Interface().(type) {
		case string:
			f.SetString(name + " \"quoted\" <&> \n\t\x01 é \u2028")
		case int, time.Duration:
			f.SetInt(int64(i + 1))
		case bool:
			f.SetBool(true)
		case time.Time:
			f.Set(reflect.ValueOf(time.Date(2026, 12, 4, 18, 0, 0, 123456789, time.UTC)))
		case *session.ToolCallDelta:
			f.Set(reflect.ValueOf(&session.ToolCallDelta{CallID: "call_1", Name: "grep", InputDelta: `{"q":"a`}))
		case *session.ToolCall:
			f.Set(reflect.ValueOf(&session.ToolCall{CallID: "call_1", Name: "grep", Input: json.RawMessage(`{ "q": "<a>" }`)}))
		case *provider.Usage:
			f.Set(reflect.ValueOf(&provider.Usage{InputTokens: int64(i), OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4, ReasoningTokens: 5}))
		case *float64:
			x := 0.000125 * float64(i)
			f.Set(reflect.ValueOf(&x))
		default:
			t.Fatalf("session.Event.%s: a field of type %s the test does not set (and appendStoredEvent may not write)", name, f.Type())
		}
	}
	return e
}

// stored decodes an entry as Events does.
func stored(t testing.TB, data []byte, id string, seq uint64) session.Event {
	t.Helper()
	var e session.Event
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("entry %s does not decode: %v", data, err)
	}
	e.Seq = seq
	if e.SessionID == "" {
		e.SessionID = id
	}
	return e
}

// sameAsMarshal checks that e's entry decodes to the event json.Marshal's
// whole object decodes to.
func sameAsMarshal(t testing.TB, e session.Event) []byte {
	t.Helper()
	got, err := appendStoredEvent(nil, &e)
	whole, merr := json.Marshal(e)
	if (err != nil) != (merr != nil) {
		t.Fatalf("appendStoredEvent error %v, json.Marshal error %v", err, merr)
	}
	if err != nil {
		return nil
	}
	id := e.SessionID // the stream's session
	if id == "" {
		id = "ses_x"
	}
	if a, b := stored(t, got, id, e.Seq), stored(t, whole, id, e.Seq); !reflect.DeepEqual(a, b) {
		t.Fatalf("entry %s decodes to\n%+v\njson.Marshal's %s to\n%+v", got, a, whole, b)
	}
	return got
}

func TestStoredEventIsMarshal(t *testing.T) {
	e := everyField(t)
	got := sameAsMarshal(t, e)
	// With every field set, the entry is json.Marshal's object byte for
	// byte, but for the two members it leaves to the stream.
	whole, _ := json.Marshal(e)
	want := bytes.Replace(whole, []byte(`{"SessionID":"","Seq":0,`), []byte("{"), 1)
	if !bytes.Equal(got, want) {
		t.Fatalf("entry\n%s\njson.Marshal's\n%s", got, want)
	}

	// Each field alone.
	v := reflect.ValueOf(e)
	for i := 0; i < v.NumField(); i++ {
		var one session.Event
		reflect.ValueOf(&one).Elem().Field(i).Set(v.Field(i))
		sameAsMarshal(t, one)
	}
	sameAsMarshal(t, session.Event{})
	// The id and seq: not in the entry, given back from the stream.
	full := session.Event{SessionID: "ses_x", Seq: 42, Type: session.EventMessageUpdate, TextDelta: "hi"}
	if got := sameAsMarshal(t, full); bytes.Contains(got, []byte("ses_x")) || bytes.Contains(got, []byte("42")) {
		t.Fatalf("entry %s holds the session's id or the seq", got)
	}
}

func TestStoredEventRefusesWhatMarshalRefuses(t *testing.T) {
	nan := math.NaN()
	for name, e := range map[string]session.Event{
		"a year past 9999":                     {Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"a cost that is NaN":                   {CostUSD: &nan},
		"a retry cost of NaN":                  {RetryCostUSD: &nan},
		"a tool call's input that is not JSON": {ToolCall: &session.ToolCall{CallID: "c", Input: json.RawMessage(`{"q":`)}},
	} {
		if _, err := json.Marshal(e); err == nil {
			t.Fatalf("%s: json.Marshal takes it", name)
		}
		prefix := []byte("kept")
		got, err := appendStoredEvent(prefix, &e)
		if err == nil {
			t.Fatalf("%s: appendStoredEvent wrote %s", name, got)
		}
		if !bytes.Equal(got, prefix) {
			t.Fatalf("%s: the buffer is %q after the error, want what it held before", name, got)
		}
	}
}

// A delta, most of a stream's entries: small, and written without an
// allocation into a buffer with room.
func TestStoredDeltaIsSmallAndAllocatesNothing(t *testing.T) {
	e := session.Event{SessionID: "ses_0123456789abcdefghijklmnop", Seq: 4801, Time: time.Now(),
		Type: session.EventMessageUpdate, PromptID: "prm_0123456789abcdefghijklmnop", TextDelta: "hello wor"}
	got := sameAsMarshal(t, e)
	whole, _ := json.Marshal(e)
	if len(got) > 140 || 3*len(got) > len(whole) {
		t.Fatalf("a delta's entry is %d bytes (json.Marshal's object %d): %s", len(got), len(whole), got)
	}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = appendStoredEvent(buf[:0], &e); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("appendStoredEvent of a delta: %v allocations, want 0", n)
	}
}

func FuzzStoredEvent(f *testing.F) {
	f.Add("message_update", "hello", "", "", int64(0), false)
	f.Add("auto_retry_start", "", "\x00\xff\"\\", "overloaded </script>", int64(1500*time.Millisecond), true)
	f.Fuzz(func(t *testing.T, typ, text, thinking, errMsg string, delay int64, success bool) {
		sameAsMarshal(t, session.Event{Seq: 7, Time: time.Unix(0, delay).UTC(), Type: typ, TextDelta: text,
			ThinkingDelta: thinking, ErrorMessage: errMsg, Delay: time.Duration(delay), Success: success,
			ToolCallDelta: &session.ToolCallDelta{InputDelta: text}})
	})
}

func BenchmarkStoredEvent(b *testing.B) {
	e := session.Event{SessionID: "ses_0123456789abcdefghijklmnop", Seq: 4801, Time: time.Now(),
		Type: session.EventMessageUpdate, PromptID: "prm_0123456789abcdefghijklmnop", TextDelta: "hello wor"}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf, _ = appendStoredEvent(buf[:0], &e)
		}
		b.ReportMetric(float64(len(buf)), "bytes/entry")
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		var data []byte
		for b.Loop() {
			data, _ = json.Marshal(e)
		}
		b.ReportMetric(float64(len(data)), "bytes/entry")
	})
	// What a follower's read of the entry costs (Events: json.Unmarshal).
	entry, _ := appendStoredEvent(nil, &e)
	whole, _ := json.Marshal(e)
	for name, data := range map[string][]byte{"read/entry": entry, "read/json.Marshal's": whole} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var got session.Event
				if err := json.Unmarshal(data, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
