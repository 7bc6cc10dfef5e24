// Package redistest runs a redis-server of a test's own on a free loopback
// port, keeping nothing on disk, for the tests of the Redis-backed stores.
// .ci/run installs redis-server; without it the tests that need one skip.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// redisServer is a redis-server of the test's own, on a free loopback port,
// keeping nothing on disk. It is killed when the test ends.
type Server struct {
	t      *testing.T
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts a redis-server, or skips the test when there is none on
// PATH. It is killed when the test ends.
func Start(t *testing.T) *Server {
	t.Helper()
	s := New(t)
	s.Start()
	return s
}

// New reserves a port for a redis-server without starting it (Start starts
// it); it skips the test when redis-server is not on PATH.
func New(t *testing.T) *Server {
	t.Helper()
	Require(t)
	s := &Server{t: t, port: freePort(t)}
	t.Cleanup(s.Kill)
	return s
}

// Require skips the test when redis-server is not on PATH.
func Require(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH: skipping the Redis store tests (apt-get install redis-server)")
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Start runs redis-server on its port and waits until it answers PING.
func (s *Server) Start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.t.TempDir(), "--loglevel", "warning")
	var out strings.Builder
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(s.cmd, s.exited)

	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !s.ping() {
		select {
		case <-s.exited:
			s.t.Fatalf("redis-server on port %d exited:\n%s", s.port, out.String())
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
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// Kill stops redis-server (SIGKILL: no shutdown, like a crash).
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}
