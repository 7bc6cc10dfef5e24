package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/bench/mock"
)

const mockUsage = `Usage: agentd mock-provider [--listen ADDR] [--delay-ms N] [--chunk-delay-ms N] [--tokens N] [--faults SCRIPT] [--api-key KEY] [--stamp] [--log]

A mock LLM provider for chaos testing: it speaks the streaming formats of
Anthropic Messages (POST …/messages), OpenAI Responses (…/responses) and
OpenAI Chat Completions (…/chat/completions), and plays fault scripts — the
simulated provider's grammar — from a [[faults: …]] directive in the
prompt, else the X-Mock-Faults header, else --faults. The n-th request
carrying the same prompt text plays the n-th step, so a retry of
"hello [[faults: 529,429:retry-after=2,ok]]" meets the 429, the next one the
answer. Per request: [[tokens: N]] or X-Mock-Tokens, [[pace: first=MS,
chunk=MS]] or X-Mock-Delay-Ms and X-Mock-Chunk-Delay-Ms, X-Mock-Stamp.
GET /mock/stats shows the counters.

Point agentd (or any client) at it:
  providers: [{name: mock, kind: anthropic, base_url: http://127.0.0.1:8090, credentials: [{id: k1, api_key: any}]}]
  (openai-responses and openai-chat: base_url http://127.0.0.1:8090/v1)

Flags:
`

// runMockProvider is "agentd mock-provider".
func runMockProvider(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mock-provider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, mockUsage)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:8090", "listen address (port 0: any free port, printed on start)")
	delay := fs.Int("delay-ms", 0, "milliseconds before every response (time to first byte)")
	chunkDelay := fs.Int("chunk-delay-ms", 0, "milliseconds between two frames of a stream")
	tokens := fs.Int("tokens", 0, "answer length in words of lorem ipsum (0: echo the prompt)")
	faults := fs.String("faults", "", `default fault script for prompts without one, e.g. "529,429:retry-after=2,ok"`)
	apiKey := fs.String("api-key", "", "require this API key (x-api-key or Authorization: Bearer); else the kind's 401")
	stamp := fs.Bool("stamp", false, "stamp every text delta with its send time (s<unix ns>a<arrival unix ns>)")
	logReqs := fs.Bool("log", false, "log one line per request to stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agentd mock-provider: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *delay < 0 || *chunkDelay < 0 {
		fmt.Fprintln(stderr, "agentd mock-provider: --delay-ms and --chunk-delay-ms must be >= 0")
		return 2
	}
	opts := mock.Options{
		Delay: time.Duration(*delay) * time.Millisecond, ChunkDelay: time.Duration(*chunkDelay) * time.Millisecond,
		Tokens: *tokens, Faults: *faults, APIKey: *apiKey, Stamp: *stamp,
	}
	if *logReqs {
		opts.Log = stderr
	}
	m, err := mock.New(opts)
	if err != nil {
		fmt.Fprintln(stderr, "agentd mock-provider:", err)
		return 2
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "agentd mock-provider:", err)
		return 1
	}
	srv := &http.Server{Handler: m, ConnState: m.ConnState, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "mock provider listening on http://%s\n", lis.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		fmt.Fprintln(stderr, "agentd mock-provider:", err)
		return 1
	case <-ctx.Done():
	}
	m.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return 0
}
