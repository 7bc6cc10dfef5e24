package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/server/sse"
)

// gatewayPrompt is the gateway's own reading of a prompt body.
func gatewayPrompt(b []byte) (*agentdv1.PromptRequest, error) {
	m := sse.APIJSON()
	req := &agentdv1.PromptRequest{}
	if err := m.NewDecoder(bytes.NewReader(b)).Decode(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return req, nil
}

// promptRequest is a request whose body readBody has read.
func promptRequest(b []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/sessions/s:prompt", nil)
	r.Body = &readBytes{Reader: bytes.NewReader(b), b: b}
	return r
}

func TestDecodePromptMatchesTheGateway(t *testing.T) {
	jsonpb := sse.APIJSON()
	cases := []struct {
		body string
		fast bool // read without the gateway's decoder
	}{
		{`{"text":"hello"}`, true},
		{` { "text" : "hello" , "cancelOnDisconnect" : true } `, true},
		{`{"cancel_on_disconnect":false,"text":"a"}`, true},
		{`{"sessionId":"s1","text":"x"}`, true},
		{`{"session_id":"s1"}`, true},
		{`{}`, true},
		{`{"text":"line\nbreak \"quoted\" back\\slash \/ \t\r\b\f"}`, true},
		{"{\"text\":\"h\u00e9llo \u4e16\u754c \U0001F600\"}", true},
		{"\n{\"text\":\"a\"}\r\n\t", true},
		// Everything else is the gateway's, which accepts or refuses it.
		{`{"text":"\u0041\ud83d\ude00"}`, false},
		{`{"text":"lone \ud800"}`, false},
		{`{"text":"a","text":"b"}`, false},
		{`{"cancelOnDisconnect":true,"cancel_on_disconnect":false}`, false},
		{`{"text":null}`, false},
		{`{"text":1}`, false},
		{`{"text":"a","params":{"temperature":0.5}}`, false},
		{`{"text":"a","unknown":1}`, false},
		{`{"te\u0078t":"a"}`, false},
		{`{"text":"a"} {"text":"b"}`, false},
		{`{"text":"a"}x`, false},
		{`{"text":"a",}`, false},
		{`{"cancelOnDisconnect":truex}`, false},
		{`{"cancelOnDisconnect":tru}`, false},
		{"{\"text\":\"tab\there\"}", false},
		{"{\"text\":\"\xff\xfe\"}", false},
		{`{"text":"unterminated`, false},
		{`{"text":"a\`, false},
		{`[]`, false},
		{``, false},
		{`   `, false},
		{`{"text":"a"`, false},
	}
	for _, c := range cases {
		b := []byte(c.body)
		var fast agentdv1.PromptRequest
		if got := parsePromptJSON(b, &fast); got != c.fast {
			t.Errorf("%q: read by the fast path %v, want %v", c.body, got, c.fast)
		}
		want, wantErr := gatewayPrompt(b)
		var req agentdv1.PromptRequest
		err := decodePrompt(promptRequest(b), &jsonpb, &req)
		switch {
		case wantErr != nil:
			if err == nil || status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != wantErr.Error() {
				t.Errorf("%q: error %v, want InvalidArgument %q", c.body, err, wantErr)
			}
		case err != nil:
			t.Errorf("%q: error %v, the gateway read %v", c.body, err, want)
		case !proto.Equal(&req, want):
			t.Errorf("%q: read %v, the gateway read %v", c.body, &req, want)
		}
		if c.fast && wantErr != nil {
			t.Errorf("%q: the fast path read what the gateway refuses: %v", c.body, wantErr)
		}
	}
}

// Other marshalers (another Content-Type's) and bodies that readBody did
// not read are the gateway's decoder's.
func TestDecodePromptFastOnlyForTheAPIJSON(t *testing.T) {
	b := []byte(`{"text":"a"}`)
	strict := sse.APIJSON()
	strict.UnmarshalOptions.DiscardUnknown = true
	if plainJSON(&strict) {
		t.Error("a marshaler with other rules takes the fast path")
	}
	jsonpb := sse.APIJSON()
	if !plainJSON(&jsonpb) || !plainJSON(sse.NewMarshaler()) {
		t.Error("the API's JSON marshalers do not take the fast path")
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/sessions/s:prompt", bytes.NewReader(b))
	var req agentdv1.PromptRequest
	if err := decodePrompt(r, &jsonpb, &req); err != nil || req.GetText() != "a" {
		t.Errorf("an unread body: %v, %v", &req, err)
	}
}

// FuzzPromptBody checks the fast path against the gateway's decoder: what
// it reads, the gateway reads to the same request. Run it with
//
//	go test -run '^$' -fuzz '^FuzzPromptBody$' -fuzztime 5m ./internal/server/
func FuzzPromptBody(f *testing.F) {
	for _, s := range []string{
		`{"text":"hello"}`, `{"text":"a\nb","cancelOnDisconnect":true}`, `{"session_id":"x","text":""}`,
		`{"text":"\u00e9"}`, `{"text":"a","text":"b"}`, `{}`, ` {"cancel_on_disconnect": false } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast agentdv1.PromptRequest
		if !parsePromptJSON(b, &fast) {
			return
		}
		want, err := gatewayPrompt(b)
		if err != nil {
			t.Fatalf("%q: the fast path read %v, the gateway refuses it: %v", b, &fast, err)
		}
		if !proto.Equal(&fast, want) {
			t.Fatalf("%q: the fast path read %v, the gateway %v", b, &fast, want)
		}
	})
}
