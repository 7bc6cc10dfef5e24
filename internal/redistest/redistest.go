// Package redistest runs redis-servers of a test's own on free loopback
// ports, keeping nothing on disk but what a node needs, for the tests of the
// Redis-backed stores: one server (Start), a 6-node Cluster (StartCluster)
// or a master, a replica and 3 Sentinels (StartSentinel), with helpers to
// kill a node (SIGKILL, like a crash) and wait for the topology to heal.
// .ci/run installs redis-server; without it the tests that need one skip.
// Every wait polls Redis' own state within a bounded time.
package redistest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server of the test's own, on a free loopback port. It
// is killed when the test ends.
type Server struct {
	t    testing.TB
	port int
	dir  string   // --dir ("": a temporary one)
	conf string   // a configuration file, first argument ("": none)
	args []string // more arguments
	// tlsPort, when not 0, is a TLS port besides the plain one (useTLS).
	tlsPort int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *logBuffer
}

// Start starts a redis-server, or skips the test when there is none on
// PATH. It is killed when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := New(t)
	s.Start()
	return s
}

// StartWith starts a redis-server with more configuration arguments
// (e.g. "--user", "default", "on", ">pw", "~*", "+@all").
func StartWith(t testing.TB, args ...string) *Server {
	t.Helper()
	s := New(t)
	s.args = args
	s.Start()
	return s
}

// New reserves a port for a redis-server without starting it (Start starts
// it); it skips the test when redis-server is not on PATH.
func New(t testing.TB) *Server {
	t.Helper()
	Require(t)
	s := &Server{t: t, port: freePort(t), out: &logBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			if tail := s.out.tail(2048); tail != "" {
				t.Logf("redis-server %d said:\n%s", s.port, tail)
			}
		}
	})
	t.Cleanup(s.Kill)
	return s
}

// Client is a plain go-redis client of addr (a test's probe: to read or
// plant keys behind agentd's back), closed when the test ends.
func Client(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Require skips the test when redis-server is not on PATH.
func Require(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH: skipping the Redis store tests (apt-get install redis-server)")
	}
}

// RequireCLI skips the test when redis-cli is not on PATH (a Cluster is
// created with it).
func RequireCLI(t testing.TB) {
	t.Helper()
	Require(t)
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("redis-cli is not on PATH: skipping the Redis Cluster tests (apt-get install redis-tools)")
	}
}

// freePort returns a loopback port that was free a moment ago, for a
// redis-server to bind. It is taken below the kernel's ephemeral range
// (where a listen on port 0 picks): a port of that range, released by the
// check, may be handed meanwhile to an outgoing connection of another test
// as its local port, and redis-server's bind then fails with "Address
// already in use". Below the range only another listener can take it.
func freePort(t testing.TB) int {
	t.Helper()
	if lo := ephemeralLow(); lo > minPort+1000 {
		for range 100 {
			p := minPort + rand.IntN(lo-minPort)
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
				l.Close()
				return p
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// minPort is the lowest port freePort picks: above the registered ports
// that local services commonly use.
const minPort = 12000

// ephemeralLow is the first port of the kernel's ephemeral range (0 when
// it cannot be read: not Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

// Addr is the server's host:port.
// TLSAddr is the server's TLS address ("" without one: see
// StartClusterTLS, StartSentinelTLS).
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's port.
func (s *Server) Port() int { return s.port }

// Start runs redis-server on its port and waits until it answers PING.
func (s *Server) Start() {
	s.t.Helper()
	dir := s.dir
	if dir == "" {
		dir = s.t.TempDir()
	}
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	args = append(args, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning")
	args = append(args, s.args...)
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !s.ping() {
		select {
		case <-exited:
			s.t.Fatalf("redis-server on port %d exited:\n%s", s.port, s.out.tail(4096))
		case <-deadline.C:
			s.Kill()
			s.t.Fatalf("redis-server on port %d does not answer PING after 5s", s.port)
		case <-tick.C:
		}
	}
}

func (s *Server) ping() bool {
	c, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := fmt.Fprint(c, "PING\r\n"); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	// A server with a password answers, refusing.
	return err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH"))
}

// Kill stops redis-server (SIGKILL: no shutdown, like a crash) and waits
// for it to exit. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Running reports whether the server runs (not killed).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// logBuffer keeps what a server prints.
type logBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	if len(l.b) > 64<<10 {
		l.b = append([]byte(nil), l.b[len(l.b)-32<<10:]...)
	}
	return len(p), nil
}

func (l *logBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.b) > n {
		return string(l.b[len(l.b)-n:])
	}
	return string(l.b)
}

// mkdir makes a node's directory.
func mkdir(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
