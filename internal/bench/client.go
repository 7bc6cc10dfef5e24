package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/bench/mock"
)

// Delta is one text delta a client received: when (Unix ns) and, from its
// stamp, when the mock wrote it and when the mock got the request.
type Delta struct{ Recv, Write, Arrival int64 }

// Turn is what a client saw of one prompt (or one direct provider call).
// Times are Unix nanoseconds.
type Turn struct {
	Due     int64 // when the request was due (open loop: its scheduled time)
	Sent    int64 // when it was sent
	End     int64 // prompt_end (agentd) or the terminal frame (provider) received
	Deltas  []Delta
	Events  int
	Types   map[string]int // events by type, when counting
	Outcome string
	Err     error
	ends    atomic.Int32 // prompt_end events seen
}

// First is the first delta's receive time (0 when none).
func (t *Turn) First() int64 {
	if len(t.Deltas) == 0 {
		return 0
	}
	return t.Deltas[0].Recv
}

func (t *Turn) add(typ string, frame []byte) {
	t.Events++
	if t.Types != nil {
		t.Types[typ]++
	}
	if typ == "prompt_end" {
		t.ends.Add(1)
	}
	if !deltaEvent(typ) {
		return
	}
	if w, a, ok := mock.FindStamp(frame); ok {
		t.Deltas = append(t.Deltas, Delta{Recv: time.Now().UnixNano(), Write: w, Arrival: a})
	}
}

// deltaEvent reports whether an SSE event carries one text delta: agentd's
// message_update, or a provider's delta frame (Chat frames have no event
// name).
func deltaEvent(typ string) bool {
	switch typ {
	case "message_update", "content_block_delta", "response.output_text.delta", "":
		return true
	}
	return false
}

func now() int64 { return time.Now().UnixNano() }

// terminal reports whether an SSE event ends a turn, and its outcome.
func terminal(event string, data []byte) (string, bool) {
	switch event {
	case "prompt_end":
		if i := bytes.Index(data, []byte(`"outcome":"`)); i >= 0 {
			rest := data[i+len(`"outcome":"`):]
			if j := bytes.IndexByte(rest, '"'); j >= 0 {
				return string(rest[:j]), true
			}
		}
		return "unknown", true
	case "message_stop", "response.completed", "response.incomplete", "response.failed":
		return "completed", true
	case "error":
		return "error: " + string(data), true
	}
	if bytes.Equal(data, []byte("[DONE]")) {
		return "completed", true
	}
	return "", false
}

// readSSE reads an event stream into t until a terminal event or EOF.
func readSSE(r io.Reader, t *Turn) error {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 16<<10)
	}
	return readSSEFrames(br, t)
}

func readSSEFrames(br *bufio.Reader, t *Turn) error {
	var event string
	var data, long []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, line...)
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if long != nil {
			line = append(long, line...)
			long = nil
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if event == "" && len(data) == 0 {
				continue
			}
			t.add(event, data)
			if out, ok := terminal(event, data); ok {
				t.End = now()
				t.Outcome = out
				return nil
			}
			event, data = "", data[:0]
		case bytes.HasPrefix(line, []byte("event:")):
			event = string(bytes.TrimSpace(line[6:]))
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimSpace(line[5:])...)
		}
	}
}

// Client talks to one agentd over REST/SSE and gRPC.
type Client struct {
	HTTP  *http.Client
	Base  string // http://host:port
	conns []*grpc.ClientConn
	apis  []agentdv1.AgentServiceClient
	next  atomic.Uint64
}

// NewHTTPClient is the bench's HTTP client: keep-alive connections for any
// concurrency, no compression.
func NewHTTPClient() *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 20000,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{Transport: tr}
}

// NewClient connects to a: grpcConns gRPC connections (streams are spread
// over them) and an HTTP client.
func NewClient(a *Agentd, grpcConns int) (*Client, error) {
	c := &Client{HTTP: NewHTTPClient(), Base: "http://" + a.HTTP}
	for range max(grpcConns, 1) {
		conn, err := grpc.NewClient(a.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(8<<20))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.conns = append(c.conns, conn)
		c.apis = append(c.apis, agentdv1.NewAgentServiceClient(conn))
	}
	return c, nil
}

// Close closes the connections.
func (c *Client) Close() {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.HTTP.CloseIdleConnections()
}

// API is a gRPC client, round robin over the connections.
func (c *Client) API() agentdv1.AgentServiceClient {
	return c.apis[c.next.Add(1)%uint64(len(c.apis))]
}

// CreateSession creates a session and returns its id.
func (c *Client) CreateSession(ctx context.Context, req *agentdv1.CreateSessionRequest) (string, error) {
	s, err := c.API().CreateSession(ctx, req)
	if err != nil {
		return "", err
	}
	return s.GetId(), nil
}

// CreateSessions creates n sessions with conc requests in flight.
func (c *Client) CreateSessions(ctx context.Context, n, conc int, req *agentdv1.CreateSessionRequest) ([]string, error) {
	ids := make([]string, n)
	err := parallel(ctx, n, conc, func(i int) error {
		id, err := c.CreateSession(ctx, req)
		ids[i] = id
		return err
	})
	return ids, err
}

// DeleteSessions deletes sessions with conc requests in flight.
func (c *Client) DeleteSessions(ctx context.Context, ids []string, conc int) error {
	return parallel(ctx, len(ids), conc, func(i int) error {
		_, err := c.API().DeleteSession(ctx, &agentdv1.DeleteSessionRequest{SessionId: ids[i]})
		return err
	})
}

// PromptSSE sends a prompt over REST and reads its SSE stream to prompt_end.
func (c *Client) PromptSSE(ctx context.Context, id, text string, t *Turn) error {
	body := `{"text":` + strconv.Quote(text) + `}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+"/v1/sessions/"+id+":prompt", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	return c.doSSE(req, t)
}

// StartPrompt starts a prompt without following it (REST, Accept:
// application/json: agentd answers once the prompt has started).
func (c *Client) StartPrompt(ctx context.Context, id, text string) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body := `{"text":` + strconv.Quote(text) + `}`
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.Base+"/v1/sessions/"+id+":prompt", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// FollowSSE reads GET /v1/sessions/{id}/events after seq after until
// ctx is done (or the stream ends).
func (c *Client) FollowSSE(ctx context.Context, id string, after uint64, t *Turn) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		c.Base+"/v1/sessions/"+id+"/events?afterSeq="+strconv.FormatUint(after, 10), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	return c.doSSEAll(req, t)
}

func (c *Client) doSSE(req *http.Request, t *Turn) error {
	err := sendSSE(c.HTTP, req, t)
	if err == nil && strings.HasPrefix(t.Outcome, "error") {
		err = errors.New(t.Outcome)
	}
	return err
}

// open sends req and returns its response when it is a 200, else an error
// with the status and the start of the body.
func open(hc *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return resp, nil
}

// sendSSE sends req, stamping the turn's send time, and reads its SSE
// answer to the end of the turn.
func sendSSE(hc *http.Client, req *http.Request, t *Turn) error {
	if t.Sent == 0 {
		t.Sent = now()
	}
	resp, err := open(hc, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = readSSE(resp.Body, t)
	drain(resp.Body)
	return err
}

// drain reads a stream's rest (after its terminal event: the end of the
// chunked body), so that the connection is reused as a real client's would
// be.
func drain(r io.Reader) {
	_, _ = io.CopyN(io.Discard, r, 64<<10)
}

// doSSEAll reads every frame until the stream ends or the request's context
// is done (which is not an error).
func (c *Client) doSSEAll(req *http.Request, t *Turn) error {
	resp, err := open(c.HTTP, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	for {
		err := readSSEFrames(br, t)
		if req.Context().Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if strings.HasPrefix(t.Outcome, "error") {
			return errors.New(t.Outcome)
		}
	}
}

// PromptGRPC sends a prompt over gRPC and reads its stream to prompt_end.
func (c *Client) PromptGRPC(ctx context.Context, id, text string, t *Turn) error {
	if t.Sent == 0 {
		t.Sent = now()
	}
	stream, err := c.API().Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Text: text})
	if err != nil {
		return err
	}
	return recvGRPC(stream, t, true)
}

// FollowGRPC reads StreamEvents after seq after until ctx is done.
func (c *Client) FollowGRPC(ctx context.Context, id string, after uint64, t *Turn) error {
	stream, err := c.API().StreamEvents(ctx, &agentdv1.StreamEventsRequest{SessionId: id, AfterSeq: after})
	if err != nil {
		return err
	}
	err = recvGRPC(stream, t, false)
	if ctx.Err() != nil {
		return nil //nolint:nilerr // the caller ended the stream: its cut is no failure
	}
	return err
}

func recvGRPC(stream grpc.ServerStreamingClient[agentdv1.Event], t *Turn, untilEnd bool) error {
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) && !untilEnd {
				return nil
			}
			return err
		}
		t.Events++
		if t.Types != nil {
			t.Types[ev.GetType()]++
		}
		if d := ev.GetMessageUpdate().GetTextDelta(); d != "" {
			if w, a, err := mock.ParseStamp(d); err == nil {
				t.Deltas = append(t.Deltas, Delta{Recv: now(), Write: w, Arrival: a})
			}
		}
		if pe := ev.GetPromptEnd(); pe != nil {
			t.ends.Add(1)
			t.Outcome = pe.GetOutcome()
			if untilEnd {
				t.End = now()
				return nil
			}
		}
	}
}

// ProviderCall is a direct streaming call to the mock (or through the
// floor proxy): an Anthropic Messages request with the given headers.
func ProviderCall(ctx context.Context, hc *http.Client, base, text string, headers map[string]string, t *Turn) error {
	body := `{"model":"bench","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":` + strconv.Quote(text) + `}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("x-api-key", "mock-key")
	req.Header.Set("anthropic-version", "2023-06-01")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return sendSSE(hc, req, t)
}

// IdleSubscriber is an SSE subscriber that reads nothing after the response
// headers: an open connection and nothing else on the bench's side.
type IdleSubscriber struct{ conn net.Conn }

// Close closes the connection.
func (s *IdleSubscriber) Close() { _ = s.conn.Close() }

// OpenIdleSSE opens GET /v1/sessions/{id}/events (Accept: text/event-stream)
// from local (a loopback address, so that many connections do not run out
// of ephemeral ports), waits for the 200 and leaves the stream unread.
func OpenIdleSSE(ctx context.Context, httpAddr, id string, local net.IP, rcvBuf int) (*IdleSubscriber, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if local != nil {
		d.LocalAddr = &net.TCPAddr{IP: local}
	}
	conn, err := d.DialContext(ctx, "tcp", httpAddr)
	if err != nil {
		return nil, err
	}
	if rcvBuf > 0 {
		_ = conn.(*net.TCPConn).SetReadBuffer(rcvBuf)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	// afterSeq=0 replays the session's events: the response starts at once.
	fmt.Fprintf(conn, "GET /v1/sessions/%s/events?afterSeq=0 HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", id, httpAddr)
	br := bufio.NewReaderSize(conn, 512)
	status, err := br.ReadString('\n')
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("subscriber %s: %w", id, err)
	}
	if !strings.Contains(status, " 200 ") {
		// The error's body, for the notes: past the headers, a few hundred bytes.
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		rest, _ := io.ReadAll(io.LimitReader(br, 2048))
		conn.Close()
		_, body, _ := strings.Cut(string(rest), "\r\n\r\n")
		if len(body) > 300 {
			body = body[:300]
		}
		return nil, fmt.Errorf("subscriber %s: %s %s", id, strings.TrimSpace(status), strings.TrimSpace(body))
	}
	_ = conn.SetDeadline(time.Time{})
	return &IdleSubscriber{conn: conn}, nil
}

// loopbackIP is the i-th source address of 127.0.0.0/8 used to spread
// connections (127.0.0.2, 127.0.0.3, …): 20000 connections per address.
func loopbackIP(i int) net.IP {
	n := 2 + i/20000
	return net.IPv4(127, 0, byte(n>>8), byte(n))
}
