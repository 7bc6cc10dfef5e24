package chat

import (
	"context"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/testkit"
	tea "github.com/charmbracelet/bubbletea"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// waitLimit bounds every wait of the tests.
const waitLimit = 20 * time.Second

const testConfig = "retry: {base_delay_ms: 10}\n"

// startServer runs a real agentd on loopback ports (agentdtest.Start)
// and returns its gRPC address; it drains when the test ends.
func startServer(t *testing.T, yaml string) string {
	t.Helper()
	return agentdtest.Start(t, yaml).GRPCAddr()
}

// dialAPI connects to agentd.
func dialAPI(t *testing.T, addr string) agentdv1.AgentServiceClient {
	t.Helper()
	conn, err := Dial(addr, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentdv1.NewAgentServiceClient(conn)
}

func testContext(t *testing.T) context.Context { return testkit.ContextFor(t, waitLimit) }

// fakeAPI is a scripted AgentService that records the commands it gets.
type fakeAPI struct {
	API // unused methods panic

	mu      sync.Mutex
	calls   []string
	changed chan struct{} // closed and replaced at each call

	prompts      chan *fakeStream // what Prompt returns, in order
	streamEvents chan *fakeStream // what StreamEvents returns, in order
	toolErr      error
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{changed: make(chan struct{}), prompts: make(chan *fakeStream, 8), streamEvents: make(chan *fakeStream, 8)}
}

func (f *fakeAPI) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	close(f.changed)
	f.changed = make(chan struct{})
}

// count returns how many recorded calls start with prefix.
func (f *fakeAPI) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func (f *fakeAPI) Prompt(ctx context.Context, in *agentdv1.PromptRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[agentdv1.Event], error) {
	f.record("Prompt " + in.GetText())
	select {
	case s := <-f.prompts:
		s.ctx = ctx
		return s, nil
	default:
		return nil, status.Error(codes.Internal, "fake: no stream scripted")
	}
}

func (f *fakeAPI) StreamEvents(ctx context.Context, in *agentdv1.StreamEventsRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[agentdv1.Event], error) {
	f.record("StreamEvents after " + strconv.FormatUint(in.GetAfterSeq(), 10))
	select {
	case s := <-f.streamEvents:
		s.ctx = ctx
		return s, nil
	default:
		return nil, status.Error(codes.Unavailable, "fake: connection refused")
	}
}

func (f *fakeAPI) AbortRetry(context.Context, *agentdv1.AbortRetryRequest, ...grpc.CallOption) (*agentdv1.AbortRetryResponse, error) {
	f.record("AbortRetry")
	return &agentdv1.AbortRetryResponse{}, nil
}

func (f *fakeAPI) Abort(context.Context, *agentdv1.AbortRequest, ...grpc.CallOption) (*agentdv1.AbortResponse, error) {
	f.record("Abort")
	return &agentdv1.AbortResponse{}, nil
}

func (f *fakeAPI) SubmitToolResults(_ context.Context, in *agentdv1.SubmitToolResultsRequest, _ ...grpc.CallOption) (*agentdv1.SubmitToolResultsResponse, error) {
	for _, r := range in.GetResults() {
		f.record("SubmitToolResults " + r.GetCallId() + "=" + r.GetContent())
	}
	if f.toolErr != nil {
		return nil, f.toolErr
	}
	return &agentdv1.SubmitToolResultsResponse{}, nil
}

// fakeStream delivers the events sent on its channel; closing the channel
// ends it with err (io.EOF when nil).
type fakeStream struct {
	grpc.ClientStream
	ctx    context.Context
	events chan *agentdv1.Event
	err    error
}

func newFakeStream(evs ...*agentdv1.Event) *fakeStream {
	s := &fakeStream{events: make(chan *agentdv1.Event, 64)}
	for _, ev := range evs {
		s.events <- ev
	}
	return s
}

func (s *fakeStream) Recv() (*agentdv1.Event, error) {
	select {
	case ev, ok := <-s.events:
		if !ok {
			if s.err != nil {
				return nil, s.err
			}
			return nil, io.EOF
		}
		return ev, nil
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

// seq numbers events 1, 2, 3…
func seq(evs ...*agentdv1.Event) []*agentdv1.Event {
	for i, ev := range evs {
		ev.Seq = uint64(i + 1)
	}
	return evs
}

// driver runs a Model as bubbletea would, without a terminal: commands run
// in goroutines and their messages come back to Update one at a time. The
// tick command is replaced and the clock is the test's.
type driver struct {
	t    *testing.T
	m    *Model
	msgs chan tea.Msg
	wg   sync.WaitGroup
	now  time.Time
	quit bool
}

func newDriver(t *testing.T, m *Model) *driver {
	d := &driver{t: t, m: m, msgs: make(chan tea.Msg, 1024), now: t0}
	m.now = func() time.Time { return d.now }
	m.tick = func() tea.Cmd { return nil }
	t.Cleanup(func() {
		m.Close()
		d.wg.Wait()
	})
	d.run(m.Init())
	return d
}

// send gives msg to Update and runs the command it returns.
func (d *driver) send(msg tea.Msg) {
	_, cmd := d.m.Update(msg)
	d.run(cmd)
}

func (d *driver) key(k tea.KeyType) { d.send(tea.KeyMsg{Type: k}) }

func (d *driver) typeText(s string) { d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)}) }

func (d *driver) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.deliver(cmd())
	}()
}

// deliver expands batches (concurrently) and sequences (in order, as
// bubbletea does) and queues every other message.
func (d *driver) deliver(msg tea.Msg) {
	if msg == nil {
		return
	}
	if b, ok := msg.(tea.BatchMsg); ok {
		for _, c := range b {
			d.run(c)
		}
		return
	}
	if v := reflect.ValueOf(msg); v.Kind() == reflect.Slice && v.Type().Elem() == reflect.TypeFor[tea.Cmd]() {
		for i := range v.Len() { // a sequence
			if c, _ := v.Index(i).Interface().(tea.Cmd); c != nil {
				d.deliver(c())
			}
		}
		return
	}
	d.msgs <- msg
}

// until handles messages until cond holds.
func (d *driver) until(what string, cond func() bool) {
	d.t.Helper()
	timeout := time.NewTimer(waitLimit)
	defer timeout.Stop()
	for !cond() {
		select {
		case msg := <-d.msgs:
			if _, ok := msg.(tea.QuitMsg); ok {
				d.quit = true
				continue
			}
			d.send(msg)
		case <-timeout.C:
			d.t.Fatalf("timed out waiting for %s; lines:\n%s\nview:\n%s", what, strings.Join(d.m.Lines(), "\n"), d.m.View())
		}
	}
}

// printedLine reports whether a committed line is exactly s.
func (d *driver) printedLine(s string) bool {
	for _, l := range d.m.Lines() {
		if l == s {
			return true
		}
	}
	return false
}

// proxy forwards TCP connections to a target and can cut them all, to
// simulate a lost connection.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(u, c); u.Close(); c.Close() }()
		go func() { defer p.wg.Done(); io.Copy(c, u); u.Close(); c.Close() }()
	}
}

// cut closes every connection made so far; new ones are still accepted.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) close() {
	p.ln.Close()
	p.cut()
	p.wg.Wait()
}

var errUnavailable = status.Error(codes.Unavailable, "connection reset")

func noDelay(int) time.Duration { return 0 }
