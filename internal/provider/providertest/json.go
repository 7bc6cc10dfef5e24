package providertest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// The wire formats are written with an ordered JSON writer rather than
// encoding/json so that field order and spacing are exactly the providers':
// Anthropic's documented streams put a space after ':' and ',' (the
// Python json.dumps default), OpenAI's are compact.

// kv is one member of a JSON object.
type kv struct {
	k string
	v any
}

// obj is a JSON object with ordered members.
type obj []kv

// arr is a JSON array.
type arr []any

// rawJSON is JSON written as is.
type rawJSON string

// enc writes v as JSON. Values: nil (null), string, bool, int, int64,
// float64, rawJSON, obj, arr.
func enc(spaced bool, v any) string {
	var b strings.Builder
	encTo(&b, spaced, v)
	return b.String()
}

func encTo(b *strings.Builder, spaced bool, v any) {
	sep, colon := ",", ":"
	if spaced {
		sep, colon = ", ", ": "
	}
	encStyle(b, sep, colon, v)
}

// encStyle writes v with sep between members and colon after keys.
func encStyle(b *strings.Builder, sep, colon string, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case string:
		b.WriteString(jsonString(v))
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case int:
		b.WriteString(strconv.Itoa(v))
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(strconv.FormatFloat(v, 'f', -1, 64))
	case rawJSON:
		b.WriteString(string(v))
	case obj:
		b.WriteByte('{')
		for i, m := range v {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(jsonString(m.k))
			b.WriteString(colon)
			encStyle(b, sep, colon, m.v)
		}
		b.WriteByte('}')
	case arr:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteString(sep)
			}
			encStyle(b, sep, colon, e)
		}
		b.WriteByte(']')
	default:
		panic("providertest: cannot encode " + strconv.Quote(strings.TrimSpace(jsonString(v))))
	}
}

// jsonString is v as JSON, without HTML escaping (the providers do not
// escape <, > and &).
func jsonString(v any) string {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return `""`
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// orNull is s, or JSON null when s is empty.
func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}
