package server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testkit"
)

// A keep-alive connection left idle for http.idle_timeout_ms is closed by
// the server, and Connections counts the open ones, idle or busy, from
// their accept to their close.
func TestIdleConnectionsAreClosedAndCounted(t *testing.T) {
	ts := start(t, "http: {idle_timeout_ms: 300}\n")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	addr := strings.TrimPrefix(ts.baseURL, "http://")
	if n := ts.srv.Connections(); n != 0 {
		t.Fatalf("Connections() = %d before any client", n)
	}

	const clients = 3
	conns := make([]net.Conn, clients)
	readers := make([]*bufio.Reader, clients)
	for i := range conns {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i], readers[i] = c, bufio.NewReader(c)
		// One request, answered: the connection is then idle, kept alive.
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(readers[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("GET /healthz: %s, close %v", resp.Status, resp.Close)
		}
	}
	if n := ts.srv.Connections(); n != clients {
		t.Fatalf("Connections() = %d with %d kept-alive clients", n, clients)
	}

	// Each idle connection is closed by the server: its read ends (EOF,
	// or a reset), well before the test's own deadline.
	for i, c := range conns {
		if err := c.SetReadDeadline(time.Now().Add(testTimeout)); err != nil {
			t.Fatal(err)
		}
		_, err := readers[i].ReadByte()
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("client %d: the idle connection was not closed by the server: %v", i, err)
		}
	}
	// The count follows the closes (the server counts right after its
	// close, which the client may see first).
	testkit.Eventually(t, "Connections() back to 0 after every connection closed", func() bool { return ts.srv.Connections() == 0 })
}
