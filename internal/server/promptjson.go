package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/server/sse"
)

// A prompt's body is read on every prompt, before the model call. The
// gateway's JSON decoder reads it twice (encoding/json into a raw message,
// then protojson by reflection), and on a replica that waits between
// prompts that code runs cold: about 50 µs of the way to the provider for
// a body of one short field. decodePrompt reads the common shape itself —
// a flat object of text, cancel_on_disconnect and session_id, each at most
// once, their strings without \u escapes — and hands everything else
// (params, null, numbers, an unknown or repeated field, \u escapes, text
// that is not UTF-8, anything after the object) to the gateway's decoder,
// which accepts or refuses it as before. So the fast path only ever
// accepts what the gateway's decoder reads to the same request
// (FuzzPromptBody checks it against the decoder).

// decodePrompt reads r's body (as readBody left it) into req with the
// inbound marshaler's rules; an error is the gateway's InvalidArgument.
func decodePrompt(r *http.Request, inbound runtime.Marshaler, req *agentdv1.PromptRequest) error {
	if b, ok := r.Body.(*readBytes); ok && plainJSON(inbound) && parsePromptJSON(b.b, req) {
		return nil
	}
	if err := inbound.NewDecoder(r.Body).Decode(req); err != nil && !errors.Is(err, io.EOF) {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	return nil
}

// plainJSON reports whether m decodes with the API's JSON rules (sse.APIJSON),
// the only rules parsePromptJSON follows.
func plainJSON(m runtime.Marshaler) bool {
	switch m := m.(type) {
	case *runtime.JSONPb:
		return m.UnmarshalOptions == sse.APIJSON().UnmarshalOptions
	case *sse.Marshaler:
		return m.UnmarshalOptions == sse.APIJSON().UnmarshalOptions
	}
	return false
}

// readBytes is a request body read whole by readBody: what is left of it,
// and all of it.
type readBytes struct {
	*bytes.Reader
	b []byte
}

func (readBytes) Close() error { return nil }

// parsePromptJSON reads b into req (which it may leave half set when it
// returns false) if b is a prompt request of the common shape.
func parsePromptJSON(b []byte, req *agentdv1.PromptRequest) bool {
	p := jsonScan{b: b}
	if !p.byte('{') {
		return false
	}
	var seenText, seenCancel, seenID bool
	if p.byte('}') {
		return p.end()
	}
	for {
		key, ok := p.key()
		if !ok || !p.byte(':') {
			return false
		}
		switch key {
		case "text":
			if seenText {
				return false
			}
			seenText = true
			if req.Text, ok = p.str(); !ok {
				return false
			}
		case "sessionId", "session_id":
			if seenID {
				return false
			}
			seenID = true
			if req.SessionId, ok = p.str(); !ok {
				return false
			}
		case "cancelOnDisconnect", "cancel_on_disconnect":
			if seenCancel {
				return false
			}
			seenCancel = true
			if req.CancelOnDisconnect, ok = p.boolean(); !ok {
				return false
			}
		default:
			return false
		}
		if p.byte('}') {
			return p.end()
		}
		if !p.byte(',') {
			return false
		}
	}
}

// jsonScan reads JSON tokens from b.
type jsonScan struct {
	b []byte
	i int
}

func (p *jsonScan) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c (after white space) if it is next.
func (p *jsonScan) byte(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether nothing but white space follows.
func (p *jsonScan) end() bool {
	p.space()
	return p.i == len(p.b)
}

// key reads an object key: a string without escapes (a field name).
func (p *jsonScan) key() (string, bool) {
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	start := p.i + 1
	for i := start; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			p.i = i + 1
			return string(p.b[start:i]), true
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

// str reads a string value: valid UTF-8, no control character, escapes
// other than \u.
func (p *jsonScan) str() (string, bool) {
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	start := p.i + 1
	i := start
	for ; i < len(p.b); i++ {
		c := p.b[i]
		if c == '"' {
			raw := p.b[start:i]
			if !utf8.Valid(raw) {
				return "", false
			}
			p.i = i + 1
			return string(raw), true
		}
		if c == '\\' || c < 0x20 {
			break
		}
	}
	// With escapes: unescaped into a buffer.
	out := make([]byte, 0, len(p.b)-start)
	out = append(out, p.b[start:i]...)
	for ; i < len(p.b); i++ {
		c := p.b[i]
		switch {
		case c == '"':
			if !utf8.Valid(out) {
				return "", false
			}
			p.i = i + 1
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			continue
		}
		if i++; i >= len(p.b) {
			return "", false
		}
		switch p.b[i] {
		case '"', '\\', '/':
			out = append(out, p.b[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		default: // \u (surrogates and all) is the decoder's
			return "", false
		}
	}
	return "", false
}

// boolean reads true or false.
func (p *jsonScan) boolean() (bool, bool) {
	p.space()
	switch {
	case bytes.HasPrefix(p.b[p.i:], []byte("true")):
		p.i += 4
		return true, p.delimited()
	case bytes.HasPrefix(p.b[p.i:], []byte("false")):
		p.i += 5
		return false, p.delimited()
	}
	return false, false
}

// delimited reports whether a literal just read ends there (truex is not
// true).
func (p *jsonScan) delimited() bool {
	if p.i == len(p.b) {
		return true
	}
	switch p.b[p.i] {
	case ' ', '\t', '\n', '\r', ',', '}':
		return true
	}
	return false
}
