package sim

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// StepKind is what one step of a fault script does.
type StepKind string

// Step kinds. StepHTTP is any of the HTTP statuses in [Statuses]; the others
// are named in scripts as their value.
const (
	StepOK               StepKind = "ok"
	StepHTTP             StepKind = "http"
	StepOverloadedStream StepKind = "overloaded-stream"
	StepMidstream        StepKind = "midstream"
	StepCut              StepKind = "cut"
	StepReset            StepKind = "reset"
	StepTimeout          StepKind = "timeout"
	StepOverflow         StepKind = "overflow"
	StepUsage            StepKind = "usage"
	StepStale            StepKind = "stale"
	StepStaleReasoning   StepKind = "stale-reasoning"
	StepRefusal          StepKind = "refusal"
	StepAbort            StepKind = "abort"
	StepHang             StepKind = "hang"
)

// namedKinds are the kinds a script names by their value.
var namedKinds = []StepKind{
	StepOK, StepOverloadedStream, StepMidstream, StepCut, StepReset, StepTimeout,
	StepOverflow, StepUsage, StepStale, StepStaleReasoning, StepRefusal, StepAbort, StepHang,
}

// Statuses are the HTTP statuses a script step may name.
var Statuses = []int{400, 401, 403, 404, 408, 409, 413, 429, 500, 502, 503, 504, 529}

// Limits of directive and option values.
const (
	MaxTokens  = 100000  // [[tokens: N]] and after=N
	MaxDelayMS = 3600000 // delay=N
)

// Step is one step of a fault script.
type Step struct {
	Kind   StepKind
	Status int // StepHTTP: the HTTP status

	Delay time.Duration // delay=N: waited before the step plays
	// After is after=N: the words streamed before a midstream or cut failure,
	// or before a hang; 0 means the kind's default.
	After int
	// Response headers, as written in the script; "" when not set.
	RetryAfter   string // retry-after=N, seconds
	RetryAfterMS string // retry-after-ms=N, milliseconds
	Reset        string // reset=V, an RFC 3339 time or a Go duration from now
}

// String returns the step as a script writes it, e.g. "429:retry-after=2".
func (s Step) String() string {
	var b strings.Builder
	if s.Kind == StepHTTP {
		b.WriteString(strconv.Itoa(s.Status))
	} else {
		b.WriteString(string(s.Kind))
	}
	opt := func(k, v string) {
		if v != "" {
			b.WriteString(":" + k + "=" + v)
		}
	}
	if s.Delay > 0 {
		opt("delay", strconv.FormatInt(s.Delay.Milliseconds(), 10))
	}
	if s.After > 0 {
		opt("after", strconv.Itoa(s.After))
	}
	opt("retry-after", s.RetryAfter)
	opt("retry-after-ms", s.RetryAfterMS)
	opt("reset", s.Reset)
	return b.String()
}

// Script is what a prompt asks of the simulated provider: its fault script
// and its answer length. The zero Script (no directives) answers every call
// with the echo.
type Script struct {
	Steps  []Step // [[faults: …]]: step i plays on the call with Request.Call == i
	Tokens int    // [[tokens: N]]; 0 answers with the echo
	// Tools is [[tools: a, b > c]]: the tool calls of each turn of the run
	// (turn 1 calls a and b, turn 2 calls c, turn 3 answers).
	Tools [][]string
}

// IsZero reports whether s holds no directive.
func (s Script) IsZero() bool { return len(s.Steps) == 0 && s.Tokens == 0 && len(s.Tools) == 0 }

// Step returns the step that plays on the call with Request.Call == call: a
// plain "ok" past the end of the script.
func (s Script) Step(call int) Step {
	if call >= 0 && call < len(s.Steps) {
		return s.Steps[call]
	}
	return Step{Kind: StepOK}
}

// String returns the directives as a prompt writes them, e.g.
// "[[tokens: 50]] [[faults: 529,ok]]", or "" for the zero Script.
func (s Script) String() string {
	var parts []string
	if s.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("[[tokens: %d]]", s.Tokens))
	}
	if len(s.Tools) > 0 {
		turns := make([]string, len(s.Tools))
		for i, names := range s.Tools {
			turns[i] = strings.Join(names, ",")
		}
		parts = append(parts, "[[tools: "+strings.Join(turns, " > ")+"]]")
	}
	if len(s.Steps) > 0 {
		steps := make([]string, len(s.Steps))
		for i, st := range s.Steps {
			steps[i] = st.String()
		}
		parts = append(parts, "[[faults: "+strings.Join(steps, ",")+"]]")
	}
	return strings.Join(parts, " ")
}

var (
	// directiveRe matches one complete directive, with the horizontal space
	// before it so that removing it leaves single spaces between words.
	directiveRe = regexp.MustCompile(`(?is)[ \t]*\[\[\s*(faults|tokens|tools)\b(.*?)\]\]`)
	// openRe finds the start of a directive that has no end.
	openRe = regexp.MustCompile(`(?i)\[\[\s*(faults|tokens|tools)\b`)

	toolNameRe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	digitsRe   = regexp.MustCompile(`^[0-9]+$`)
	decimalRe  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
)

// ParseScript finds the directives in a prompt's text and checks them. It
// returns the zero Script when the text has none, and an error that says what
// is wrong and where (e.g. `faults step 2: unknown step "foo"`) when one is
// malformed.
func ParseScript(text string) (Script, error) {
	s, _, err := parse(text)
	return s, err
}

// parse is ParseScript that also returns the text without its directives,
// trimmed.
func parse(text string) (Script, string, error) {
	var s Script
	if !strings.Contains(text, "[[") {
		// No directive: the regexps would scan a long prompt for nothing.
		return s, strings.TrimSpace(text), nil
	}
	var seenFaults, seenTokens, seenTools bool
	for _, m := range directiveRe.FindAllStringSubmatch(text, -1) {
		name := strings.ToLower(m[1])
		body, ok := strings.CutPrefix(strings.TrimSpace(m[2]), ":")
		if !ok {
			return Script{}, "", fmt.Errorf("%s: malformed directive %q: want [[%s: …]]", name, strings.TrimSpace(m[0]), name)
		}
		switch name {
		case "faults":
			if seenFaults {
				return Script{}, "", errors.New("faults: more than one [[faults: …]] directive")
			}
			seenFaults = true
			steps, err := parseSteps(body)
			if err != nil {
				return Script{}, "", err
			}
			s.Steps = steps
		case "tokens":
			if seenTokens {
				return Script{}, "", errors.New("tokens: more than one [[tokens: …]] directive")
			}
			seenTokens = true
			n, err := parseInt(body, 1, MaxTokens)
			if err != nil {
				return Script{}, "", fmt.Errorf("tokens: want a whole number from 1 to %d, got %q", MaxTokens, strings.TrimSpace(body))
			}
			s.Tokens = n
		case "tools":
			if seenTools {
				return Script{}, "", errors.New("tools: more than one [[tools: …]] directive")
			}
			seenTools = true
			turns, err := parseTools(body)
			if err != nil {
				return Script{}, "", err
			}
			s.Tools = turns
		}
	}
	rest := directiveRe.ReplaceAllString(text, "")
	if m := openRe.FindStringSubmatch(rest); m != nil {
		name := strings.ToLower(m[1])
		return Script{}, "", fmt.Errorf("%s: unterminated directive: missing \"]]\" after %q", name, m[0])
	}
	return s, strings.TrimSpace(rest), nil
}

// parseTools parses the body of a tools directive: turns separated by ">",
// the tools of one turn by ",".
func parseTools(body string) ([][]string, error) {
	var turns [][]string
	for i, turn := range strings.Split(body, ">") {
		var names []string
		for _, name := range strings.Split(turn, ",") {
			name = strings.TrimSpace(name)
			if !toolNameRe.MatchString(name) {
				return nil, fmt.Errorf("tools turn %d: %q is not a tool name", i+1, name)
			}
			names = append(names, name)
		}
		turns = append(turns, names)
	}
	return turns, nil
}

// parseSteps parses the body of a faults directive.
func parseSteps(body string) ([]Step, error) {
	if strings.TrimSpace(body) == "" {
		return nil, errors.New("faults: no steps")
	}
	fields := strings.Split(body, ",")
	steps := make([]Step, 0, len(fields))
	for i, f := range fields {
		st, err := parseStep(f)
		if err != nil {
			return nil, fmt.Errorf("faults step %d: %w", i+1, err)
		}
		steps = append(steps, st)
	}
	return steps, nil
}

// parseStep parses one step: kind{:key=value}.
func parseStep(field string) (Step, error) {
	parts := strings.Split(field, ":")
	name := strings.TrimSpace(parts[0])
	if name == "" {
		if strings.TrimSpace(field) == "" {
			return Step{}, errors.New("empty step")
		}
		return Step{}, fmt.Errorf("missing step before %q", strings.TrimSpace(field))
	}
	var st Step
	lower := strings.ToLower(name)
	if digitsRe.MatchString(lower) {
		code, _ := strconv.Atoi(lower)
		if !slices.Contains(Statuses, code) {
			return Step{}, fmt.Errorf("unknown step %q", name)
		}
		st = Step{Kind: StepHTTP, Status: code}
	} else {
		k := StepKind(lower)
		if !slices.Contains(namedKinds, k) {
			return Step{}, fmt.Errorf("unknown step %q", name)
		}
		st = Step{Kind: k}
	}

	// Options. A value may itself hold colons (an RFC 3339 reset time), so a
	// piece without "=" continues the previous option's value.
	var opts [][2]string
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			if len(opts) == 0 {
				if strings.TrimSpace(p) == "" {
					return Step{}, fmt.Errorf("%s: empty option", name)
				}
				return Step{}, fmt.Errorf("%s: option %q: want key=value", name, strings.TrimSpace(p))
			}
			opts[len(opts)-1][1] += ":" + p
			continue
		}
		opts = append(opts, [2]string{k, v})
	}
	seen := map[string]bool{}
	for _, kv := range opts {
		key := strings.ToLower(strings.TrimSpace(kv[0]))
		val := strings.TrimSpace(kv[1])
		if seen[key] {
			return Step{}, fmt.Errorf("%s: option %q given twice", name, key)
		}
		seen[key] = true
		if err := st.setOption(name, key, val); err != nil {
			return Step{}, err
		}
	}
	return st, nil
}

// setOption applies key=val to st, whose script name is name.
func (st *Step) setOption(name, key, val string) error {
	httpAnswer := st.Kind == StepHTTP || st.Kind == StepOverflow || st.Kind == StepUsage || st.Kind == StepStale ||
		st.Kind == StepStaleReasoning
	notFor := func() error {
		return fmt.Errorf("%s: option %q does not apply to this step", name, key)
	}
	switch key {
	case "delay":
		n, err := parseInt(val, 0, MaxDelayMS)
		if err != nil {
			return fmt.Errorf("%s: delay: want milliseconds from 0 to %d, got %q", name, MaxDelayMS, val)
		}
		st.Delay = time.Duration(n) * time.Millisecond
	case "after":
		if st.Kind != StepMidstream && st.Kind != StepCut && st.Kind != StepHang {
			return notFor()
		}
		n, err := parseInt(val, 1, MaxTokens)
		if err != nil {
			return fmt.Errorf("%s: after: want a number of words from 1 to %d, got %q", name, MaxTokens, val)
		}
		st.After = n
	case "retry-after":
		if !httpAnswer {
			return notFor()
		}
		if !decimalRe.MatchString(val) {
			return fmt.Errorf("%s: retry-after: want seconds (e.g. 2 or 1.5), got %q", name, val)
		}
		st.RetryAfter = val
	case "retry-after-ms":
		if !httpAnswer {
			return notFor()
		}
		if _, err := parseInt(val, 0, math.MaxInt32); err != nil {
			return fmt.Errorf("%s: retry-after-ms: want whole milliseconds, got %q", name, val)
		}
		st.RetryAfterMS = val
	case "reset":
		if !httpAnswer {
			return notFor()
		}
		if _, err := time.Parse(time.RFC3339, val); err != nil {
			d, derr := time.ParseDuration(val)
			if derr != nil || d < 0 {
				return fmt.Errorf("%s: reset: want an RFC 3339 time (e.g. 2026-08-21T12:40:59Z) or a duration (e.g. 90s), got %q", name, val)
			}
		}
		st.Reset = val
	case "":
		return fmt.Errorf("%s: option %q: missing key", name, "="+val)
	default:
		return fmt.Errorf("%s: unknown option %q", name, key)
	}
	return nil
}

// parseInt parses a plain decimal integer in [lo, hi].
func parseInt(s string, lo, hi int) (int, error) {
	s = strings.TrimSpace(s)
	if !digitsRe.MatchString(s) {
		return 0, errors.New("not a whole number")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, errors.New("out of range")
	}
	return n, nil
}
