package server

import (
	"context"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A gRPC request whose string field is not UTF-8 fails protobuf's decoding,
// and grpc-go answers any decoding failure INTERNAL ("failed to unmarshal
// the received message"), a unary call's before its interceptors run: bad
// input reported as the server's fault, naming no field. So the server's
// codec (codec.go) reads such a request as an empty message and notes the
// field, and the guard's interceptors (utf8Guard; before the token's, so
// that every noted request is looked at) answer the call INVALID_ARGUMENT
// naming it, before any handler sees the message.

// utf8Guard holds the requests the codec read so, until their call is
// answered.
type utf8Guard struct{ bad *sync.Map } // proto.Message → its field path

func newUTF8Guard() utf8Guard { return utf8Guard{bad: &sync.Map{}} }

// unmarshalled is the codec's word on the decoding of m from b: err
// itself, or nil when err is a string field's invalid UTF-8 (m reset, the
// field noted for the interceptors).
func (g utf8Guard) unmarshalled(b []byte, m proto.Message, err error) error {
	field := invalidUTF8Field(b, m.ProtoReflect().Descriptor())
	if field == "" {
		return err
	}
	proto.Reset(m)
	g.bad.Store(m, field)
	return nil
}

func (g utf8Guard) refused(m any) error {
	if f, ok := g.bad.LoadAndDelete(m); ok {
		return status.Errorf(codes.InvalidArgument, "%s: not valid UTF-8 (protobuf strings must be)", f)
	}
	return nil
}

func (g utf8Guard) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := g.refused(req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (g utf8Guard) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, utf8Stream{ss, g})
}

type utf8Stream struct {
	grpc.ServerStream
	g utf8Guard
}

func (s utf8Stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.g.refused(m)
}

// invalidUTF8Field is the path of the first string field of b (a message
// of md, wire-encoded) whose value is not UTF-8, in nested messages and
// maps too ("retry.fallback_chains.value.models"); "" when there is none
// or b does not parse.
func invalidUTF8Field(b []byte, md protoreflect.MessageDescriptor) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		switch {
		case fd == nil:
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
			return string(fd.Name())
		case fd.Kind() == protoreflect.MessageKind:
			if f := invalidUTF8Field(v, fd.Message()); f != "" {
				return string(fd.Name()) + "." + f
			}
		}
	}
	return ""
}
