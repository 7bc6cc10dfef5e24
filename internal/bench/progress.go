package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// parallel runs f(0..n-1) with at most conc in flight; it stops at the first
// error.
func parallel(ctx context.Context, n, conc int, f func(i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(conc, 1))
	for i := range n {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return f(i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// Progress writes a one-line status: rewritten in place on a terminal,
// else a line every few seconds.
type Progress struct {
	w        io.Writer
	tty      bool
	mu       sync.Mutex
	last     time.Time
	started  time.Time
	prefix   string
	lastLen  int
	interval time.Duration
}

// NewProgress writes to w (a terminal gets an in-place line).
func NewProgress(w io.Writer) *Progress {
	p := &Progress{w: w, started: time.Now(), interval: 5 * time.Second}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty, p.interval = true, 200*time.Millisecond
		}
	}
	return p
}

// Stage sets the line's prefix (round and scenario) and prints it.
func (p *Progress) Stage(format string, args ...any) {
	p.mu.Lock()
	p.prefix = fmt.Sprintf(format, args...)
	p.last = time.Time{}
	p.mu.Unlock()
	p.Update("")
}

// Update prints the status (rate-limited).
func (p *Progress) Update(format string, args ...any) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < p.interval && format != "" {
		return
	}
	p.last = time.Now()
	el := time.Since(p.started).Round(time.Second)
	line := fmt.Sprintf("[%s] %s", el, p.prefix)
	if format != "" {
		line += " " + fmt.Sprintf(format, args...)
	}
	if p.tty {
		pad := ""
		if n := p.lastLen - len(line); n > 0 {
			pad = strings.Repeat(" ", n)
		}
		fmt.Fprintf(p.w, "\r%s%s", line, pad)
		p.lastLen = len(line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// Println prints a line of its own.
func (p *Progress) Println(format string, args ...any) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.lastLen > 0 {
		fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.lastLen)+"\r")
		p.lastLen = 0
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// counter is a concurrent counter.
type counter struct{ atomic.Int64 }

func (c *counter) inc() { c.Add(1) }

func gib(b float64) float64 { return b / (1 << 30) }
func ms(ns int64) float64   { return float64(ns) / 1e6 }
