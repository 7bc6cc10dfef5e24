package server

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

func TestFixLoneSurrogates(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"plain"`, `"plain"`},
		{`"\ud83d\ude00"`, `"\ud83d\ude00"`},             // a pair
		{`"\uD83D\uDE00"`, `"\uD83D\uDE00"`},             // a pair, upper case
		{`"cut \ud83d"`, `"cut \ufffd"`},                 // a high one alone
		{`"\ude00 tail"`, `"\ufffd tail"`},               // a low one alone
		{`"\ud83d\ud83d\ude00"`, `"\ufffd\ud83d\ude00"`}, // two highs, then the pair
		{`"\ud83d\u0041"`, `"\ufffd\u0041"`},             // a high before another escape
		{`"\\ud83d"`, `"\\ud83d"`},                       // text: a backslash, then ud83d
		{`"\\\ud83d"`, `"\\\ufffd"`},                     // a backslash, then the escape
		{`"\"\ud800"`, `"\"\ufffd"`},                     // after another escape
		{`{"text":"\ud800","systemPrompt":"ok"}`, `{"text":"\ufffd","systemPrompt":"ok"}`},
		{`"\ud83`, `"\ud83`}, // cut short: the decoder's to refuse
		{`"\u00e9"`, `"\u00e9"`},
	} {
		if got := string(fixLoneSurrogates([]byte(tc.in))); got != tc.want {
			t.Errorf("fixLoneSurrogates(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	clean := []byte(`{"text":"\ud83d\ude00 no lone one"}`)
	if got := fixLoneSurrogates(clean); &got[0] != &clean[0] {
		t.Error("a body without a lone surrogate was copied")
	}
}

// For any input, the repair keeps the length and reads, with
// encoding/json, as the input does (which reads a lone surrogate as
// U+FFFD); and a JSON string of valid UTF-8, repaired, is one protobuf's
// decoder takes, to that same text.
func FuzzLoneSurrogates(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud83d"`, `"\ud83d\ude00"`, `"\\ud83d"`, `"\\\ude00x"`, `{"k":"\udbff\udfff\udc00"}`,
		`["\ud800",1,"\u12"]`, `"\u0000\uffff"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := []byte(s)
		out := fixLoneSurrogates(in)
		if len(out) != len(in) {
			t.Fatalf("length %d → %d", len(in), len(out))
		}
		var want, got any
		errWant, errGot := json.Unmarshal(in, &want), json.Unmarshal(out, &got)
		if (errWant == nil) != (errGot == nil) || !reflect.DeepEqual(want, got) {
			t.Fatalf("%q reads as %#v (%v), repaired %q as %#v (%v)", in, want, errWant, out, got, errGot)
		}
		text, ok := want.(string)
		if !ok || !utf8.Valid(in) {
			return
		}
		var req agentdv1.PromptRequest
		if err := protojson.Unmarshal([]byte(`{"text":`+string(out)+`}`), &req); err != nil {
			t.Fatalf("protojson refuses the repaired %q: %v", out, err)
		}
		if req.Text != text {
			t.Fatalf("protojson reads the repaired %q as %q, encoding/json %q", out, req.Text, text)
		}
	})
}
