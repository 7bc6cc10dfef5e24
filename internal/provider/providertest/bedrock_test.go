package providertest

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// The fake's frames are the AWS event stream encoding: lengths, the
// prelude and message CRC32s, the three headers in Bedrock's order and
// the JSON payload, as a byte-level reader sees them.
func TestBedrockFrames(t *testing.T) {
	f := BedrockEventFrame("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hi"},"p":"abc"}`)
	total := binary.BigEndian.Uint32(f[0:4])
	hlen := binary.BigEndian.Uint32(f[4:8])
	if int(total) != len(f) {
		t.Fatalf("total length %d, frame %d bytes", total, len(f))
	}
	if got, want := binary.BigEndian.Uint32(f[8:12]), crc32.ChecksumIEEE(f[0:8]); got != want {
		t.Errorf("prelude CRC %08x, want %08x", got, want)
	}
	if got, want := binary.BigEndian.Uint32(f[len(f)-4:]), crc32.ChecksumIEEE(f[:len(f)-4]); got != want {
		t.Errorf("message CRC %08x, want %08x", got, want)
	}
	// Header: name length (1), name, type 7 (string), value length (2), value.
	h := f[12 : 12+hlen]
	var names []string
	for len(h) > 0 {
		n := int(h[0])
		name := string(h[1 : 1+n])
		if h[1+n] != 7 {
			t.Fatalf("header %s has type %d, want 7 (string)", name, h[1+n])
		}
		vl := int(binary.BigEndian.Uint16(h[2+n : 4+n]))
		names = append(names, name+"="+string(h[4+n:4+n+vl]))
		h = h[4+n+vl:]
	}
	want := []string{":event-type=contentBlockDelta", ":content-type=application/json", ":message-type=event"}
	if len(names) != 3 || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] {
		t.Errorf("headers = %q, want %q", names, want)
	}
	if p := f[12+hlen : len(f)-4]; string(p) != `{"contentBlockIndex":0,"delta":{"text":"Hi"},"p":"abc"}` {
		t.Errorf("payload = %s", p)
	}

	// An exception frame decodes with the SDK's decoder.
	m, err := eventstream.NewDecoder().Decode(bytes.NewReader(BedrockExceptionFrame("throttlingException", BedrockTooManyTokensDaily)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Headers.Get(":exception-type").String() != "throttlingException" || m.Headers.Get(":message-type").String() != "exception" ||
		string(m.Payload) != `{"message":"Too many tokens per day, please wait before trying again."}` {
		t.Errorf("exception frame = %v %s", m.Headers, m.Payload)
	}
}

// A stream's events are messageStart, the blocks' events, messageStop and
// metadata, in order.
func TestBedrockEventsOrder(t *testing.T) {
	a := &Answer{Model: "m", Thinking: []string{"t"}, Text: []string{"a", "b"}, Tools: []ToolCall{{ID: "tu", Name: "ls", Args: []string{"{}"}}}}
	var types []string
	for _, f := range BedrockEvents(a) {
		m, err := eventstream.NewDecoder().Decode(bytes.NewReader(f), nil)
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, m.Headers.Get(":event-type").String())
	}
	want := "messageStart contentBlockDelta contentBlockDelta contentBlockStop contentBlockDelta contentBlockDelta contentBlockStop contentBlockStart contentBlockDelta contentBlockStop messageStop metadata"
	if got := join(types); got != want {
		t.Errorf("events:\n%s\nwant\n%s", got, want)
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x)
	}
	return b.String()
}
