package server

import (
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

// eventCodec is the gRPC server's codec: grpc-go's protobuf codec, except
// for the message of every streamed chunk, an Event carrying a
// MessageUpdate. That one is sized and written by the code vtprotobuf
// generated for it (api/gen, *_vtproto.pb.go), without protobuf-go's
// reflective walk of the message, which took ≈ 4 % of agentd's CPU at 300
// prompts/s half over gRPC.
//
// The output decodes to the same message (TestEventCodecMatchesProto
// holds it to proto.Marshal's bytes), and what proto.Marshal refuses
// stays refused: vtprotobuf does not check that strings are UTF-8, so an
// Event with a string that is not goes to the protobuf codec, which fails
// it as before. Every other message, and every Unmarshal, is the protobuf
// codec's.
//
// A request with a string that is not UTF-8 is read as an empty message
// whose call the guard's interceptors answer INVALID_ARGUMENT (utf8.go).
type eventCodec struct {
	proto encoding.CodecV2
	guard utf8Guard
}

func newEventCodec(g utf8Guard) eventCodec {
	return eventCodec{proto: encoding.GetCodecV2(grpcproto.Name), guard: g}
}

func (eventCodec) Name() string { return grpcproto.Name }

func (c eventCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.proto.Unmarshal(data, v)
	if m, ok := v.(proto.Message); ok && err != nil {
		return c.guard.unmarshalled(data.Materialize(), m, err)
	}
	return err
}

func (c eventCodec) Marshal(v any) (mem.BufferSlice, error) {
	ev, ok := v.(*agentdv1.Event)
	if !ok || !chunkEvent(ev) {
		return c.proto.Marshal(v)
	}
	size := ev.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := ev.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := ev.MarshalToSizedBufferVT(*buf); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// chunkEvent: ev is a MessageUpdate whose strings are all UTF-8, as
// proto.Marshal requires of a proto3 string.
func chunkEvent(ev *agentdv1.Event) bool {
	p, ok := ev.GetPayload().(*agentdv1.Event_MessageUpdate)
	if !ok || p.MessageUpdate == nil {
		return false
	}
	u := p.MessageUpdate
	if !utf8.ValidString(ev.GetSessionId()) || !utf8.ValidString(ev.GetType()) || !utf8.ValidString(ev.GetPromptId()) ||
		!utf8.ValidString(u.GetTextDelta()) || !utf8.ValidString(u.GetThinkingDelta()) {
		return false
	}
	d := u.GetToolCallDelta()
	return d == nil || utf8.ValidString(d.GetCallId()) && utf8.ValidString(d.GetName()) && utf8.ValidString(d.GetInputDelta())
}
