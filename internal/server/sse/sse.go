// Package sse writes the REST face's Server-Sent Events: the frames of an
// *agentdv1.Event ("id:", "event:", "data:" lines), the "event: error" frame
// of a stream's status, and the headers of an event stream. The gateway
// writes them through Marshaler (its marshaler for text/event-stream), the
// native SSE routes of package server with AppendEvent and AppendError, so
// that both write the same bytes.
package sse

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

// ContentType is an event stream's media type.
const ContentType = "text/event-stream"

// APIJSON is the JSON of agentd's REST API, as the gateway reads and
// writes it: protojson with default values written, unknown fields
// refused.
func APIJSON() runtime.JSONPb {
	return runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitDefaultValues: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}
}

// NewMarshaler is the Marshaler of the API's JSON (APIJSON).
func NewMarshaler() *Marshaler { return &Marshaler{JSONPb: APIJSON()} }

// Marshaler writes a streaming RPC's messages as Server-Sent Events: one
// frame per event, "id: <seq>", "event: <type>", "data: <event JSON>". A
// stream error becomes an "event: error" frame carrying the gRPC status.
// Requests (JSON bodies) are read as JSON.
type Marshaler struct {
	runtime.JSONPb
}

var (
	_ runtime.Delimited         = (*Marshaler)(nil)
	_ runtime.StreamContentType = (*Marshaler)(nil)
)

// ContentType, StreamContentType and Delimiter: text/event-stream, frames
// ended by a blank line (runtime.Marshaler, StreamContentType, Delimited).
func (m *Marshaler) ContentType(any) string       { return ContentType }
func (m *Marshaler) StreamContentType(any) string { return ContentType }
func (m *Marshaler) Delimiter() []byte            { return []byte("\n\n") }

// Delimiter ends a frame (Marshaler.Delimiter; read only).
var Delimiter = []byte("\n\n")

// Marshal renders a stream chunk. The gateway hands it
// {"result": msg} for a message and {"error": status} for an error.
func (m *Marshaler) Marshal(v any) ([]byte, error) {
	switch chunk := v.(type) {
	case map[string]any:
		if ev, ok := chunk["result"].(*agentdv1.Event); ok {
			return m.AppendEvent(nil, ev)
		}
		data, err := m.JSONPb.Marshal(chunk["result"])
		if err != nil {
			return nil, err
		}
		return appendData(nil, data), nil
	case map[string]proto.Message:
		return m.AppendError(nil, chunk["error"])
	default:
		// Unary answers and errors before a stream starts stay plain JSON.
		return m.JSONPb.Marshal(v)
	}
}

// AppendEvent appends ev's frame, without its delimiter, to dst. The
// gateway (Marshal) and the native SSE routes (package server) both write
// frames with it, so they write the same bytes.
func (m *Marshaler) AppendEvent(dst []byte, ev *agentdv1.Event) ([]byte, error) {
	dst = append(dst, "id: "...)
	dst = strconv.AppendUint(dst, ev.GetSeq(), 10)
	dst = append(dst, "\nevent: "...)
	dst = append(dst, ev.GetType()...)
	dst = append(dst, '\n')
	if m.fastEvents() {
		if out, ok := AppendEventJSON(append(dst, "data: "...), ev); ok {
			return out, nil
		}
	}
	return m.appendJSONData(dst, ev)
}

// fastEvents reports whether AppendEventJSON writes what m's protojson
// options write (the options the server uses).
func (m *Marshaler) fastEvents() bool {
	o := m.JSONPb.MarshalOptions
	return o.EmitDefaultValues && !o.EmitUnpopulated && !o.UseProtoNames && !o.Multiline && o.Indent == "" && o.Resolver == nil
}

// AppendError appends the "event: error" frame of a stream's status, without
// its delimiter, to dst.
func (m *Marshaler) AppendError(dst []byte, st proto.Message) ([]byte, error) {
	return m.appendJSONData(append(dst, "event: error\n"...), st)
}

// appendJSONData appends msg's JSON (the JSONPb's options, as its Marshal
// writes it) as the data lines of a frame.
func (m *Marshaler) appendJSONData(dst []byte, msg proto.Message) ([]byte, error) {
	dst = append(dst, "data: "...)
	start := len(dst)
	dst, err := m.JSONPb.MarshalOptions.MarshalAppend(dst, msg)
	if err != nil {
		return nil, err
	}
	if bytes.IndexByte(dst[start:], '\n') >= 0 {
		data := bytes.Clone(dst[start:])
		dst = appendData(dst[:start-len("data: ")], data)
	}
	return dst, nil
}

// appendData appends data as SSE data lines (JSON has no raw newlines, but
// a frame must never be split by one).
func appendData(dst, data []byte) []byte {
	for i := 0; ; i++ {
		line, rest, more := bytes.Cut(data, []byte("\n"))
		if i > 0 {
			dst = append(dst, '\n')
		}
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		if !more {
			return dst
		}
		data = rest
	}
}

// WriteData writes data as SSE data lines.
func WriteData(b *bytes.Buffer, data []byte) {
	b.Write(appendData(nil, data))
}

// Wanted reports whether the request asks for an event stream.
func Wanted(r *http.Request) bool {
	// The key as net/http's server keeps it: Values would canonicalize it
	// on every request.
	for _, a := range r.Header["Accept"] {
		if strings.Contains(a, ContentType) {
			return true
		}
	}
	return false
}

// Headers sets what proxies and browsers need on an event stream (see
// SetHeaders) before next answers a request that asks for one.
func Headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if Wanted(r) {
			SetHeaders(w.Header())
		}
		next.ServeHTTP(w, r)
	})
}

// SetHeaders sets what proxies and browsers need on an event stream: no
// caching, no buffering.
func SetHeaders(h http.Header) {
	h["Cache-Control"] = []string{"no-cache"} // h.Set, the key canonical already
	h["X-Accel-Buffering"] = []string{"no"}
}
