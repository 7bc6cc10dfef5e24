package server

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/agentd/agentd/internal/redistest"
)

// A session deleted on another replica: the event streams a replica serves
// of it end with a final error frame saying so (the gateway's and the
// native one alike), not with a bare end of stream.
func TestSSEOfSessionDeletedElsewhereEndsWithError(t *testing.T) {
	rs := redistest.Start(t)
	yaml := sseAuth + fmt.Sprintf("store:\n  backend: redis\n  redis: {addr: %q, key_prefix: \"vanish:\"}\n", rs.Addr())
	a, b := startSSE(t, yaml), startSSE(t, yaml)
	id := a.session(t, sseTokenA, "one two")
	for _, via := range []string{"gateway", ""} {
		c := b.open(t, via, "GET", "/v1/sessions/"+id+"/events", []string{sseAccept, bearerA}, "")
		c.until("event: prompt_end")
		a.do(t, "DELETE", "/v1/sessions/"+id, "", sseTokenA)
		rest := c.all() // chunked: the frames after prompt_end, then the last chunk
		frame := regexp.MustCompile(`\nevent: error\ndata: \{"code":\s*5,\s*"message":\s*"session ` + id + ` was deleted; its event stream has ended",\s*"details":\s*\[\]\}\n\n\r\n0\r\n\r\n$`)
		if !frame.MatchString(rest) {
			t.Errorf("via %q: the stream of a session deleted on another replica ends without an error frame naming why:\n%q", via, rest)
		}
		if via == "gateway" {
			id = a.session(t, sseTokenA, "three")
		}
	}
}
