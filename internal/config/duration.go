package config

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"
)

// Millis is the value of a duration key, named *_ms in the file. It is a
// count of milliseconds, as those keys have always been written
// (timeout_ms: 500), and it also decodes from a Go duration string
// (timeout_ms: 500ms, lease_ms: 1m30s, tool_result_timeout_ms: 1h). The
// count stays in milliseconds so that a Go literal (TimeoutMs: 500) means
// what the same number means in YAML; Duration gives the time.Duration.
//
// Decoding refuses a negative duration, one that is not a whole number of
// milliseconds, one longer than MaxMillis, and anything else that is not a
// number or a duration, with a type error that names the key and its line.
type Millis int64

// MaxMillis is the longest Millis: the longest time.Duration, in whole
// milliseconds (about 292 years).
const MaxMillis Millis = math.MaxInt64 / Millis(time.Millisecond)

// Duration is m as a time.Duration. A value beyond ±MaxMillis (possible
// only when set from Go code, never decoded) saturates instead of
// overflowing.
func (m Millis) Duration() time.Duration {
	switch {
	case m > MaxMillis:
		return math.MaxInt64
	case m < -MaxMillis:
		return math.MinInt64
	}
	return time.Duration(m) * time.Millisecond
}

// optionalDuration is the duration of an optional key: nil when the file
// does not set it.
func optionalDuration(m *Millis) *time.Duration {
	if m == nil {
		return nil
	}
	d := m.Duration()
	return &d
}

var (
	// millisType is Millis as yaml's type errors name it.
	millisType = reflect.TypeFor[Millis]().String()
	// durationShape is the syntax of a Go duration; a string of that shape
	// that time.ParseDuration refuses is out of range.
	durationShape = regexp.MustCompile(`^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)
	// unitless is a quoted number: a duration string without its unit.
	unitless = regexp.MustCompile(`^[-+]?[0-9]+(?:\.[0-9]*)?$`)
)

// UnmarshalYAML implements yaml.Unmarshaler: a number is milliseconds,
// decoded as an integer key always was; a string is a Go duration.
func (m *Millis) UnmarshalYAML(n *yaml.Node) error {
	var d time.Duration
	switch {
	case n.Kind != yaml.ScalarNode:
		return millisError(n, "")
	case n.ShortTag() == "!!str":
		var err error
		if d, err = time.ParseDuration(n.Value); err != nil {
			switch {
			case unitless.MatchString(n.Value):
				return millisError(n, "has no unit: write milliseconds unquoted, or a unit (500ms, 5m)")
			case durationShape.MatchString(n.Value):
				return millisError(n, fmt.Sprintf("is out of range; a duration is at most %s", MaxMillis.Duration()))
			}
			return millisError(n, "")
		}
		if d%time.Millisecond != 0 {
			return millisError(n, "is not a whole number of milliseconds")
		}
	default:
		var ms int64
		if err := n.Decode(&ms); err != nil {
			// A number, but not an int64: reported as out of range rather
			// than as not a number.
			var f float64
			if n.Decode(&f) == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				if f < 0 {
					return millisError(n, "is negative; a duration must be >= 0")
				}
				return millisError(n, fmt.Sprintf("is out of range; a duration is at most %d milliseconds", MaxMillis))
			}
			return millisError(n, "")
		}
		switch {
		case ms < 0:
			return millisError(n, "is negative; a duration must be >= 0")
		case ms > int64(MaxMillis):
			return millisError(n, fmt.Sprintf("is out of range; a duration is at most %d milliseconds", MaxMillis))
		}
		d = time.Duration(ms) * time.Millisecond
	}
	if d < 0 {
		return millisError(n, "is negative; a duration must be >= 0")
	}
	*m = Millis(d / time.Millisecond)
	return nil
}

// millisError is a type error about node n, worded as yaml words its own
// (line, tag, value as yaml shows it, Go type) so that describeYAMLError
// finds the key it is about; reason, when set, says what is wrong instead
// of "is not a duration".
func millisError(n *yaml.Node, reason string) error {
	tag := n.ShortTag()
	value := ""
	if tag != "!!seq" && tag != "!!map" {
		// yaml shows a long value's first 7 characters and "...".
		v := n.Value
		if len(v) > 10 {
			v = v[:7] + "..."
		}
		value = " `" + v + "`"
	}
	msg := fmt.Sprintf("line %d: cannot unmarshal %s%s into %s", n.Line, tag, value, millisType)
	if reason != "" {
		msg += "; " + reason
	}
	return &yaml.TypeError{Errors: []string{msg}}
}
