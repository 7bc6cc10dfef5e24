package sim

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseScriptNone(t *testing.T) {
	for _, text := range []string{"", "hello", "[[other: 1]] text", "[faults: 529]", "[[faultsy: 529]]"} {
		s, err := ParseScript(text)
		if err != nil {
			t.Errorf("ParseScript(%q) error: %v", text, err)
		}
		if !s.IsZero() {
			t.Errorf("ParseScript(%q) = %+v, want the zero Script", text, s)
		}
	}
}

func TestParseScript(t *testing.T) {
	tests := []struct {
		text string
		want Script
	}{
		{
			text: "[[faults: 529,429:retry-after=2,ok]] hello",
			want: Script{Steps: []Step{
				{Kind: StepHTTP, Status: 529},
				{Kind: StepHTTP, Status: 429, RetryAfter: "2"},
				{Kind: StepOK},
			}},
		},
		{
			// Whitespace, case and newlines are tolerated.
			text: "hi [[ FAULTS :\n 500 : Retry-After = 1.5 : RETRY-AFTER-MS=1500 ,  Overloaded-Stream ,\tOK : delay = 500 ]] there",
			want: Script{Steps: []Step{
				{Kind: StepHTTP, Status: 500, RetryAfter: "1.5", RetryAfterMS: "1500"},
				{Kind: StepOverloadedStream},
				{Kind: StepOK, Delay: 500 * time.Millisecond},
			}},
		},
		{
			// An RFC 3339 reset keeps its colons.
			text: "[[faults: 429:reset=2026-08-21T12:40:59Z:retry-after=3, usage:reset=5h]]",
			want: Script{Steps: []Step{
				{Kind: StepHTTP, Status: 429, Reset: "2026-08-21T12:40:59Z", RetryAfter: "3"},
				{Kind: StepUsage, Reset: "5h"},
			}},
		},
		{
			text: "[[faults: midstream:after=3,cut,reset,timeout,overflow,usage:retry-after=60,stale,refusal,abort,hang:after=2]]",
			want: Script{Steps: []Step{
				{Kind: StepMidstream, After: 3},
				{Kind: StepCut},
				{Kind: StepReset},
				{Kind: StepTimeout},
				{Kind: StepOverflow},
				{Kind: StepUsage, RetryAfter: "60"},
				{Kind: StepStale},
				{Kind: StepRefusal},
				{Kind: StepAbort},
				{Kind: StepHang, After: 2},
			}},
		},
		{
			text: "load [[Tokens: 250]]",
			want: Script{Tokens: 250},
		},
		{
			text: "[[tokens:5]][[faults:400,401,403,404,408,409,413,429,500,502,503,504,529]]",
			want: Script{Tokens: 5, Steps: []Step{
				{Kind: StepHTTP, Status: 400}, {Kind: StepHTTP, Status: 401}, {Kind: StepHTTP, Status: 403},
				{Kind: StepHTTP, Status: 404}, {Kind: StepHTTP, Status: 408}, {Kind: StepHTTP, Status: 409},
				{Kind: StepHTTP, Status: 413}, {Kind: StepHTTP, Status: 429}, {Kind: StepHTTP, Status: 500},
				{Kind: StepHTTP, Status: 502}, {Kind: StepHTTP, Status: 503}, {Kind: StepHTTP, Status: 504},
				{Kind: StepHTTP, Status: 529},
			}},
		},
	}
	for _, tt := range tests {
		got, err := ParseScript(tt.text)
		if err != nil {
			t.Errorf("ParseScript(%q) error: %v", tt.text, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseScript(%q)\n got %+v\nwant %+v", tt.text, got, tt.want)
		}
		// The canonical form parses back to the same script.
		again, err := ParseScript(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("ParseScript(%q) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
}

func TestScriptString(t *testing.T) {
	s, err := ParseScript("[[faults: 529 , 429:retry-after=2, OK:delay=500, midstream:after=2]] [[tokens: 9]]")
	if err != nil {
		t.Fatal(err)
	}
	want := "[[tokens: 9]] [[faults: 529,429:retry-after=2,ok:delay=500,midstream:after=2]]"
	if got := s.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (Script{}).String(); got != "" {
		t.Errorf("zero Script String() = %q, want empty", got)
	}
}

func TestScriptStep(t *testing.T) {
	s, _ := ParseScript("[[faults: 529,abort]]")
	for call, want := range []StepKind{StepHTTP, StepAbort, StepOK, StepOK} {
		if got := s.Step(call).Kind; got != want {
			t.Errorf("Step(%d).Kind = %q, want %q", call, got, want)
		}
	}
	if got := (Script{}).Step(0).Kind; got != StepOK {
		t.Errorf("zero Script Step(0).Kind = %q, want ok", got)
	}
}

func TestParseScriptErrors(t *testing.T) {
	tests := []struct{ text, want string }{
		{"[[faults: ok,foo]]", `faults step 2: unknown step "foo"`},
		{"[[faults: 418]]", `faults step 1: unknown step "418"`},
		{"[[faults: Bogus:delay=5]]", `faults step 1: unknown step "Bogus"`},
		{"[[faults: ]]", `faults: no steps`},
		{"[[faults: 529,,ok]]", `faults step 2: empty step`},
		{"[[faults: 529,]]", `faults step 2: empty step`},
		{"[[faults: :delay=5]]", `faults step 1: missing step before ":delay=5"`},
		{"[[faults: 529:foo=1]]", `faults step 1: 529: unknown option "foo"`},
		{"[[faults: 529:delay]]", `faults step 1: 529: option "delay": want key=value`},
		{"[[faults: 529:]]", `faults step 1: 529: empty option`},
		{"[[faults: 529:=5]]", `faults step 1: 529: option "=5": missing key`},
		{"[[faults: ok:delay=abc]]", `faults step 1: ok: delay: want milliseconds from 0 to 3600000, got "abc"`},
		{"[[faults: ok:delay=-5]]", `faults step 1: ok: delay: want milliseconds from 0 to 3600000, got "-5"`},
		{"[[faults: ok:delay=3600001]]", `faults step 1: ok: delay: want milliseconds from 0 to 3600000, got "3600001"`},
		{"[[faults: ok:delay=1:delay=2]]", `faults step 1: ok: option "delay" given twice`},
		{"[[faults: ok:retry-after=2]]", `faults step 1: ok: option "retry-after" does not apply to this step`},
		{"[[faults: overloaded-stream:reset=5s]]", `faults step 1: overloaded-stream: option "reset" does not apply to this step`},
		{"[[faults: 429:after=2]]", `faults step 1: 429: option "after" does not apply to this step`},
		{"[[faults: 429:retry-after=soon]]", `faults step 1: 429: retry-after: want seconds (e.g. 2 or 1.5), got "soon"`},
		{"[[faults: 429:retry-after=-1]]", `faults step 1: 429: retry-after: want seconds (e.g. 2 or 1.5), got "-1"`},
		{"[[faults: 429:retry-after=2:x]]", `faults step 1: 429: retry-after: want seconds (e.g. 2 or 1.5), got "2:x"`},
		{"[[faults: 429:retry-after-ms=1.5]]", `faults step 1: 429: retry-after-ms: want whole milliseconds, got "1.5"`},
		{"[[faults: usage:reset=tomorrow]]", `faults step 1: usage: reset: want an RFC 3339 time (e.g. 2026-08-21T12:40:59Z) or a duration (e.g. 90s), got "tomorrow"`},
		{"[[faults: usage:reset=-5s]]", `faults step 1: usage: reset: want an RFC 3339 time (e.g. 2026-08-21T12:40:59Z) or a duration (e.g. 90s), got "-5s"`},
		{"[[faults: midstream:after=0]]", `faults step 1: midstream: after: want a number of words from 1 to 100000, got "0"`},
		{"[[faults: 529]] [[faults: ok]]", `faults: more than one [[faults: …]] directive`},
		{"[[faults 529]]", `faults: malformed directive "[[faults 529]]": want [[faults: …]]`},
		{"hi [[faults: 529", `faults: unterminated directive: missing "]]" after "[[faults"`},
		{"[[tokens: 0]]", `tokens: want a whole number from 1 to 100000, got "0"`},
		{"[[tokens: 100001]]", `tokens: want a whole number from 1 to 100000, got "100001"`},
		{"[[tokens: many]]", `tokens: want a whole number from 1 to 100000, got "many"`},
		{"[[tokens: 5]] [[TOKENS: 6]]", `tokens: more than one [[tokens: …]] directive`},
	}
	for _, tt := range tests {
		s, err := ParseScript(tt.text)
		if err == nil {
			t.Errorf("ParseScript(%q) = %+v, want error %q", tt.text, s, tt.want)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("ParseScript(%q) error\n got %q\nwant %q", tt.text, err, tt.want)
		}
		if !s.IsZero() {
			t.Errorf("ParseScript(%q) returned %+v with its error, want the zero Script", tt.text, s)
		}
	}
}

func TestParseRemovesDirectives(t *testing.T) {
	tests := []struct{ text, want string }{
		{"hello [[faults: 529]] world", "hello world"},
		{"  [[tokens: 3]]\thello\n", "hello"},
		{"[[faults: ok]]", ""},
		{"a\n[[faults: ok]]\nb", "a\n\nb"},
	}
	for _, tt := range tests {
		_, got, err := parse(tt.text)
		if err != nil || got != tt.want {
			t.Errorf("parse(%q) text = %q, %v; want %q", tt.text, got, err, tt.want)
		}
	}
}

func TestStatusesAllHaveAnswers(t *testing.T) {
	for _, st := range Statuses {
		b := statusBody(st, "m")
		if b.typ == "" && b.message == "" && st != 408 && st != 502 {
			t.Errorf("status %d has no answer", st)
		}
		if strings.Contains(b.message, "…") {
			t.Errorf("status %d message is truncated: %q", st, b.message)
		}
	}
}
