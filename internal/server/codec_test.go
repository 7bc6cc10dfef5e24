package server

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

func chunk(text string) *agentdv1.Event {
	return &agentdv1.Event{SessionId: "ses_0123456789abcdefghijklmnop", Seq: 42, Time: &timestamppb.Timestamp{Seconds: 1764720000, Nanos: 123456789},
		Type: "message_update", PromptId: "prm_0123456789abcdefghijklmnop",
		Payload: &agentdv1.Event_MessageUpdate{MessageUpdate: &agentdv1.MessageUpdate{TextDelta: text}}}
}

// codecBytes is what the server's codec writes of m, or its error.
func codecBytes(t testing.TB, m proto.Message) ([]byte, error) {
	t.Helper()
	bs, err := newEventCodec(newUTF8Guard()).Marshal(m)
	if err != nil {
		return nil, err
	}
	defer bs.Free()
	return bs.Materialize(), nil
}

// The server's codec writes every message byte for byte as proto.Marshal
// does, the chunks it encodes itself (of every size: below and above
// grpc-go's pooling threshold) as the rest.
func TestEventCodecMatchesProto(t *testing.T) {
	withTool := chunk("")
	withTool.GetMessageUpdate().ToolCallDelta = &agentdv1.ToolCallDelta{CallId: "toolu_1", Name: "search", InputDelta: `{"q":"fé`}
	thinking := chunk("")
	thinking.GetMessageUpdate().ThinkingDelta = "hmm… 🤔"
	bare := &agentdv1.Event{Payload: &agentdv1.Event_MessageUpdate{MessageUpdate: &agentdv1.MessageUpdate{}}}
	msgs := []proto.Message{
		chunk("Hello"), chunk(""), chunk("naïve ☃ \u2028 \x00"), chunk(strings.Repeat("long delta ", 200)), withTool, thinking, bare,
		&agentdv1.Event{SessionId: "ses_x", Seq: 7, Type: "prompt_end", Payload: &agentdv1.Event_PromptEnd{PromptEnd: &agentdv1.PromptEnd{Outcome: "completed"}}},
		&agentdv1.Event{Type: "message_update", Payload: &agentdv1.Event_MessageUpdate{}}, // a nil update: the protobuf codec's
		&agentdv1.ListSessionsResponse{NextPageToken: "p"},
	}
	for i, m := range msgs {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatalf("%d: proto.Marshal: %v", i, err)
		}
		got, err := codecBytes(t, m)
		if err != nil {
			t.Fatalf("%d: codec: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d (%T): codec wrote\n%x\nproto.Marshal\n%x", i, m, got, want)
		}
	}
}

// What proto.Marshal refuses (a string that is not UTF-8), the codec
// refuses too, in any of a chunk's strings.
func TestEventCodecRefusesWhatProtoRefuses(t *testing.T) {
	bad := "\xff\xfe"
	for name, set := range map[string]func(*agentdv1.Event){
		"text":       func(e *agentdv1.Event) { e.GetMessageUpdate().TextDelta = bad },
		"thinking":   func(e *agentdv1.Event) { e.GetMessageUpdate().ThinkingDelta = bad },
		"session":    func(e *agentdv1.Event) { e.SessionId = bad },
		"type":       func(e *agentdv1.Event) { e.Type = bad },
		"prompt":     func(e *agentdv1.Event) { e.PromptId = bad },
		"tool input": func(e *agentdv1.Event) { e.GetMessageUpdate().ToolCallDelta = &agentdv1.ToolCallDelta{InputDelta: bad} },
		"tool name":  func(e *agentdv1.Event) { e.GetMessageUpdate().ToolCallDelta = &agentdv1.ToolCallDelta{Name: bad} },
		"tool id":    func(e *agentdv1.Event) { e.GetMessageUpdate().ToolCallDelta = &agentdv1.ToolCallDelta{CallId: bad} },
	} {
		ev := chunk("ok")
		set(ev)
		if _, err := proto.Marshal(ev); err == nil {
			t.Fatalf("%s: proto.Marshal accepted it", name)
		}
		if _, err := codecBytes(t, ev); err == nil {
			t.Errorf("%s: the codec accepted a string that is not UTF-8", name)
		}
	}
}

// FuzzEventCodec: for any chunk, the codec writes proto.Marshal's bytes,
// or fails where it fails.
func FuzzEventCodec(f *testing.F) {
	f.Add("ses_a", uint64(1), int64(1764720000), int32(5), "message_update", "prm_a", "Hello", "", "", "", "")
	f.Add("", uint64(0), int64(-1), int32(-1), "", "", "\xff", "think", "id", "name", `{"a":`)
	f.Fuzz(func(t *testing.T, sid string, seq uint64, secs int64, nanos int32, typ, pid, text, thinking, callID, name, input string) {
		ev := chunk(text)
		ev.SessionId, ev.Seq, ev.Type, ev.PromptId = sid, seq, typ, pid
		ev.Time = &timestamppb.Timestamp{Seconds: secs, Nanos: nanos}
		u := ev.GetMessageUpdate()
		u.ThinkingDelta = thinking
		if callID != "" || name != "" || input != "" {
			u.ToolCallDelta = &agentdv1.ToolCallDelta{CallId: callID, Name: name, InputDelta: input}
		}
		want, werr := proto.Marshal(ev)
		got, gerr := codecBytes(t, ev)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("proto.Marshal: %v, the codec: %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("codec wrote\n%x\nproto.Marshal\n%x", got, want)
		}
	})
}

// BenchmarkChunkCodec: a streamed chunk's encoding, the server's codec
// against grpc-go's protobuf codec (≈ 350 against ≈ 800 ns here, warm;
// the same allocations).
func BenchmarkChunkCodec(b *testing.B) {
	ev := chunk("Hello, this is a delta of a few words ")
	for _, c := range []struct {
		name string
		c    encoding.CodecV2
	}{{"server", newEventCodec(newUTF8Guard())}, {"protobuf", encoding.GetCodecV2(grpcproto.Name)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bs, err := c.c.Marshal(ev)
				if err != nil {
					b.Fatal(err)
				}
				bs.Free()
			}
		})
	}
}
