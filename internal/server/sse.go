package server

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

const (
	sseContentType = "text/event-stream"
	lastEventIDKey = "last-event-id"
)

// sseMarshaler writes a streaming RPC's messages as Server-Sent Events: one
// frame per event, "id: <seq>", "event: <type>", "data: <event JSON>". A
// stream error becomes an "event: error" frame carrying the gRPC status.
// Requests (JSON bodies) are read as JSON.
type sseMarshaler struct {
	runtime.JSONPb
}

var (
	_ runtime.Delimited         = (*sseMarshaler)(nil)
	_ runtime.StreamContentType = (*sseMarshaler)(nil)
)

func (m *sseMarshaler) ContentType(any) string       { return sseContentType }
func (m *sseMarshaler) StreamContentType(any) string { return sseContentType }
func (m *sseMarshaler) Delimiter() []byte            { return []byte("\n\n") }

// Marshal renders a stream chunk. The gateway hands it
// {"result": msg} for a message and {"error": status} for an error.
func (m *sseMarshaler) Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	switch chunk := v.(type) {
	case map[string]any:
		if ev, ok := chunk["result"].(*agentdv1.Event); ok {
			data, err := m.JSONPb.Marshal(ev)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "id: %d\nevent: %s\n", ev.GetSeq(), ev.GetType())
			writeData(&b, data)
			return b.Bytes(), nil
		}
		data, err := m.JSONPb.Marshal(chunk["result"])
		if err != nil {
			return nil, err
		}
		writeData(&b, data)
		return b.Bytes(), nil
	case map[string]proto.Message:
		data, err := m.JSONPb.Marshal(chunk["error"])
		if err != nil {
			return nil, err
		}
		b.WriteString("event: error\n")
		writeData(&b, data)
		return b.Bytes(), nil
	default:
		// Unary answers and errors before a stream starts stay plain JSON.
		return m.JSONPb.Marshal(v)
	}
}

// writeData writes data as SSE data lines (JSON has no raw newlines, but a
// frame must never be split by one).
func writeData(b *bytes.Buffer, data []byte) {
	for i, line := range strings.Split(string(data), "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("data: ")
		b.WriteString(line)
	}
}

// wantsSSE reports whether the request asks for an event stream.
func wantsSSE(r *http.Request) bool {
	for _, a := range r.Header.Values("Accept") {
		if strings.Contains(a, sseContentType) {
			return true
		}
	}
	return false
}

// sseHeaders sets what proxies and browsers need on an event stream: no
// caching, no buffering.
func sseHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wantsSSE(r) {
			w.Header().Set("Cache-Control", "no-cache")
			w.Header().Set("X-Accel-Buffering", "no")
		}
		next.ServeHTTP(w, r)
	})
}
