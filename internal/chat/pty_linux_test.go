//go:build linux

package chat

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY opens a pseudo-terminal pair of cols×rows: the controlling side
// (the test plays the terminal) and the terminal the program runs on.
func openPTY(t *testing.T, cols, rows uint16) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	ioctl := func(f *os.File, req uintptr, arg unsafe.Pointer) error {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), req, uintptr(arg)); e != 0 {
			return e
		}
		return nil
	}
	unlock := int32(0)
	if err := ioctl(ptmx, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		t.Fatal(err)
	}
	var n uint32
	if err := ioctl(ptmx, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ws := struct{ rows, cols, x, y uint16 }{rows, cols, 0, 0}
	if err := ioctl(tty, syscall.TIOCSWINSZ, unsafe.Pointer(&ws)); err != nil {
		t.Fatal(err)
	}
	return ptmx, tty
}

// screen collects what the program writes to the terminal.
type screen struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	notify chan struct{}
}

func (s *screen) read(f *os.File) {
	b := make([]byte, 4096)
	for {
		n, err := f.Read(b)
		s.mu.Lock()
		s.buf.Write(b[:n])
		close(s.notify)
		s.notify = make(chan struct{})
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// waitFor waits until the output after offset from contains text, and
// returns the offset after it.
func (s *screen) waitFor(t *testing.T, from int, text string) int {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		out := s.buf.String()
		ch := s.notify
		s.mu.Unlock()
		if i := strings.Index(out[from:], text); i >= 0 {
			return from + i + len(text)
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no %q on the terminal; it shows:\n%q", text, out[from:])
		}
	}
}

// TestTUIInPseudoTerminal runs agentd chat's terminal program on a real
// pseudo-terminal against a real agentd: the retry loader counts down, Esc
// cancels the retry ("Retry cancelled"), Ctrl+C quits, the terminal is left
// in its normal mode and the conversation is printed on the normal screen.
func TestTUIInPseudoTerminal(t *testing.T) {
	addr := startServer(t, testConfig)
	ptmx, tty := openPTY(t, 100, 30)
	scr := &screen{notify: make(chan struct{})}
	readDone := make(chan struct{})
	go func() { defer close(readDone); scr.read(ptmx) }()
	defer func() {
		ptmx.Close()
		<-readDone
	}()
	defer tty.Close()

	code := make(chan int, 1)
	go func() {
		code <- Run(testContext(t), Options{Addr: addr, Interactive: true}, tty, tty, tty)
	}()
	at := scr.waitFor(t, 0, "type a prompt, enter to send")
	if _, err := ptmx.WriteString("wait [[faults: 529:retry-after=30,ok]]\r"); err != nil {
		t.Fatal(err)
	}
	at = scr.waitFor(t, at, "Retrying (1/10) in 30s… (esc to cancel)")
	at = scr.waitFor(t, at, "Retrying (1/10) in 29s… (esc to cancel)") // the countdown runs
	if _, err := ptmx.WriteString("\x1b"); err != nil {                // Esc
		t.Fatal(err)
	}
	at = scr.waitFor(t, at, "Retry failed after 1 attempt: Retry cancelled")
	at = scr.waitFor(t, at, "Prompt aborted: Retry cancelled")
	if _, err := ptmx.WriteString("\x03"); err != nil { // Ctrl+C, idle: quit
		t.Fatal(err)
	}
	at = scr.waitFor(t, at, "\x1b[?1049l") // the alternate screen is left
	select {
	case c := <-code:
		if c != ExitOK {
			t.Errorf("exit code %d", c)
		}
	case <-time.After(waitLimit):
		t.Fatal("agentd chat did not exit")
	}
	// The conversation stays on the normal screen.
	scr.waitFor(t, at, "Retry failed after 1 attempt: Retry cancelled")
	// The terminal is back in canonical mode with echo.
	var tio syscall.Termios
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, tty.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&tio))); e != 0 {
		t.Fatal(e)
	}
	if tio.Lflag&syscall.ICANON == 0 || tio.Lflag&syscall.ECHO == 0 {
		t.Errorf("terminal left in raw mode: lflag %#o", tio.Lflag)
	}
}
