package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentd/agentd/internal/provider"
)

// Limits of error answers.
const (
	maxErrorBody = 1 << 20 // error bodies are read up to this size
	maxErrorText = 8 << 10 // longest provider wording kept in an error message
)

// APIError is a provider error object.
type APIError struct {
	Type, Code, Message string
	// Body is the error body or event as the provider sent it (at most
	// maxFailureBody bytes; cut: not valid JSON), for the structured hints
	// the retry engine reads from it (google.rpc RetryInfo and QuotaFailure,
	// OpenRouter's error.metadata). The client redacts it before it leaves.
	Body string
}

// maxFailureBody bounds APIError.Body.
const maxFailureBody = 64 << 10

// text formats e for a status as every client reports it; an error with a
// code but no type (OpenAI's flat shapes) shows its code instead.
func (e APIError) text(status int) string {
	typ := e.Type
	if typ == "" {
		typ = e.Code
	}
	// A text body that starts with the status ("502 Bad Gateway") is not
	// to be prefixed with it twice.
	msg := strings.TrimPrefix(e.Message, strconv.Itoa(status)+" ")
	return provider.HTTPErrorMessage(status, typ, truncate(msg, maxErrorText))
}

// ErrorObject is the JSON of an error object in every shape met: Anthropic
// {"type","message","details":{"error_code"}}, OpenAI {"message","type",
// "param","code"} where code may be a string, a number or null, Google
// {"code": 429, "message", "status": "RESOURCE_EXHAUSTED", "details": [...]},
// OpenRouter {"code": 429, "message", "metadata": {"raw", "provider_name"}}.
type ErrorObject struct {
	Type    string          `json:"type"`
	Message string          `json:"message"`
	Code    json.RawMessage `json:"code"`
	// Status is Google's canonical status name (RESOURCE_EXHAUSTED,
	// UNAVAILABLE, INVALID_ARGUMENT, …); raw, since other shapes put a
	// number there (OpenAI's stream error events).
	Status json.RawMessage `json:"status"`
	// Details is Anthropic's {"error_code"} object or Google's list of
	// google.rpc details (left to the retry engine, which reads the body).
	Details json.RawMessage `json:"details"`
	// Metadata is OpenRouter's {"raw", "provider_name"}: the upstream
	// provider's own error (a string or JSON) and its name. Raw, so that
	// another shape does not spoil the rest.
	Metadata json.RawMessage `json:"metadata"`
}

// APIError is the error o describes; its type is the type field, else
// Google's status; its code is the code field's value (a number's text),
// else details.error_code. An OpenRouter error's message gets the
// upstream's own error after it ("Provider returned error (Chutes: …)"),
// so that classification reads the real cause.
func (o ErrorObject) APIError() APIError {
	e := APIError{Type: o.Type, Message: o.Message, Code: jsonScalar(o.Code)}
	if e.Type == "" {
		if st := jsonScalar(o.Status); st != "" && (st[0] < '0' || st[0] > '9') {
			e.Type = st
		}
	}
	if e.Code == "" && len(o.Details) > 0 && o.Details[0] == '{' {
		var d struct {
			ErrorCode string `json:"error_code"`
		}
		if json.Unmarshal(o.Details, &d) == nil {
			e.Code = d.ErrorCode
		}
	}
	var md struct {
		Raw          json.RawMessage `json:"raw"`
		ProviderName string          `json:"provider_name"`
	}
	if len(o.Metadata) > 0 && o.Metadata[0] == '{' {
		_ = json.Unmarshal(o.Metadata, &md)
	}
	if raw := rawCause(md.Raw); raw != "" {
		name := md.ProviderName
		if name != "" {
			name += ": "
		}
		e.Message = strings.TrimSpace(e.Message + " (" + name + raw + ")")
	}
	return e
}

// rawCause is OpenRouter's metadata.raw as one line of text: a string's
// value, else the JSON compacted; at most 2 KiB.
func rawCause(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			return ""
		}
		s = b.String()
	}
	return truncate(strings.TrimSpace(spaceRE.ReplaceAllString(s, " ")), 2<<10)
}

// jsonScalar is a JSON string's value, a number's text, "" for null.
func jsonScalar(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

// ParseErrorBody reads an error body: {"error": {…}} (with or without a
// top-level "type":"error"), {"error": "text"}, a bare error object, FastAPI's
// {"detail": "…"}, a one-element array of those; anything else is text (an
// HTML page is its <title>).
func ParseErrorBody(body []byte) APIError {
	e := parseErrorBody(body)
	e.Body = truncate(string(bytes.TrimSpace(body)), maxFailureBody)
	return e
}

func parseErrorBody(body []byte) APIError {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var list []json.RawMessage
		if json.Unmarshal(body, &list) == nil && len(list) > 0 {
			body = list[0]
		}
	}
	var env struct {
		Error  json.RawMessage `json:"error"`
		Detail json.RawMessage `json:"detail"`
		ErrorObject
	}
	if len(body) > 0 && body[0] == '{' && json.Unmarshal(body, &env) == nil {
		var o ErrorObject
		var s string
		switch {
		case len(env.Error) > 0 && json.Unmarshal(env.Error, &o) == nil && (o.Message != "" || o.Type != "" || len(o.Code) > 0):
			return o.APIError()
		case len(env.Error) > 0 && json.Unmarshal(env.Error, &s) == nil:
			return APIError{Message: s}
		case env.Message != "":
			e := env.ErrorObject.APIError()
			if e.Type == "error" {
				e.Type = ""
			}
			return e
		case len(env.Detail) > 0:
			if json.Unmarshal(env.Detail, &s) == nil {
				return APIError{Message: s}
			}
			return APIError{Message: string(env.Detail)}
		}
	}
	return APIError{Message: plainText(body)}
}

var (
	titleRE = regexp.MustCompile(`(?is)<title[^>]*>(.*?)</title>`)
	spaceRE = regexp.MustCompile(`\s+`)
)

// plainText is a non-JSON body as one line: an HTML page's title, else the
// text with its whitespace collapsed, at most 512 bytes.
func plainText(body []byte) string {
	s := string(body)
	lower := strings.ToLower(s)
	if strings.Contains(lower, "<html") || strings.Contains(lower, "<!doctype") {
		s = ""
		if m := titleRE.FindStringSubmatch(string(body)); m != nil {
			s = m[1]
		}
	}
	return truncate(strings.TrimSpace(spaceRE.ReplaceAllString(s, " ")), 512)
}

// truncate cuts s to at most n bytes (plus an ellipsis) at a rune boundary,
// and makes it valid UTF-8.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// readErrorBody reads an error answer's body (bounded) and parses it.
func readErrorBody(r io.Reader) (APIError, error) {
	body, err := io.ReadAll(io.LimitReader(r, maxErrorBody))
	return ParseErrorBody(body), err
}
