// Command agentd hosts concurrent LLM agent sessions and keeps them alive
// through the failures of the providers behind them.
//
//	agentd serve [--config FILE] [--grpc-addr ADDR] [--http-addr ADDR]
//	agentd classify < errors.jsonl
//	agentd version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/app"
	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/redisconn"
)

const usage = `agentd hosts LLM agent sessions that survive provider failures.

Usage:
  agentd serve [--config FILE] [--grpc-addr ADDR] [--http-addr ADDR] [--log-format auto|json|text]
  agentd classify     read provider errors as JSON lines on stdin, print retry verdicts
  agentd version      print the version
  agentd chat [--addr ADDR] [--token T] [--session ID | --model PROVIDER/MODEL]   a session in the terminal
  agentd mock-provider [--listen ADDR] [--faults SCRIPT] …   a mock LLM provider for chaos testing
  agentd bench [--rounds N] [--out DIR] [SCENARIO…]   load tests against agentd (see BENCHMARKS.md)

Run "agentd COMMAND -h" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "classify":
		return classifyCommand(args[1:], stdin, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	case "chat":
		return runChat(args[1:], stdin, stdout, stderr)
	case "mock-provider":
		return runMockProvider(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "agentd: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "YAML configuration file (default: embedded defaults)")
	grpcAddr := fs.String("grpc-addr", "", "gRPC listen address (overrides listen.grpc; default 127.0.0.1:9090)")
	httpAddr := fs.String("http-addr", "", "HTTP listen address (overrides listen.http; default 127.0.0.1:8080)")
	logFormat := fs.String("log-format", "auto", "log format: json, text, or auto (text on a terminal, else json)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agentd serve: unexpected argument %q (flags only; see agentd serve -h)\n", fs.Arg(0))
		return 2
	}
	var handler slog.Handler
	if *logFormat == "auto" {
		*logFormat = "json"
		if f, ok := stderr.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				*logFormat = "text"
			}
		}
	}
	switch *logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, nil)
	case "json":
		handler = slog.NewJSONHandler(stderr, nil)
	default:
		fmt.Fprintf(stderr, "agentd serve: --log-format: %q is not text or json\n", *logFormat)
		return 2
	}
	log := slog.New(handler)
	// go-redis' own messages (pool and connection trouble) join agentd's log
	// as records of their own, not plain-text lines in the middle of it.
	redisconn.SetLogger(log)

	cfg := config.Default()
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			fmt.Fprintf(stderr, "agentd serve: %v\n", err)
			return 1
		}
	}
	warnConfig(cfg, log)
	// The flags obey the file's rules: host:port, loopback without auth.tokens.
	for _, f := range []struct{ flag, grpc, http string }{
		{"--grpc-addr", *grpcAddr, ""}, {"--http-addr", "", *httpAddr},
	} {
		if f.grpc == "" && f.http == "" {
			continue
		}
		if err := cfg.SetListen(f.grpc, f.http); err != nil {
			fmt.Fprintf(stderr, "agentd serve: %s: %v\n", f.flag, err)
			return 1
		}
	}
	var opts []app.Option
	if os.Getenv("GOMAXPROCS") == "" {
		// One P while the load is light (the README's paragraph of that
		// name); an operator's GOMAXPROCS stays as set.
		opts = append(opts, app.WithAdaptiveProcs())
	}
	a, err := app.New(cfg, log, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "agentd serve: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("agentd stopped with an error", "err", err)
		return 1
	}
	return 0
}

// warnConfig logs what a configuration allows but should not: a Redis store
// holding credential secrets in clear, and stream tickets that only the
// replica that signed them accepts.
func warnConfig(cfg *config.Config, log *slog.Logger) {
	if cfg.Store.Backend != "redis" {
		return
	}
	if cfg.Store.Redis.SecretKeyEnv == "" {
		log.Warn("credential secrets are stored in clear in Redis: set store.redis.secret_key_env to a variable holding a 16, 24 or 32-byte key (the same on every replica)",
			"key", "store.redis.secret_key_env")
	}
	if cfg.HTTP.TicketKeyEnv == "" {
		log.Warn("stream tickets are signed with a random key of this process: with several replicas, the others refuse its tickets; set http.ticket_key_env to a variable holding a key of 32+ bytes (the same on every replica)",
			"key", "http.ticket_key_env")
	}
}

// classifyCommand is `agentd classify`: no flags, input on stdin.
func classifyCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("classify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: agentd classify < errors.jsonl

Reads provider errors as JSON lines on stdin, one error each:
  {"message": "...", "status": 429, "headers": {"retry-after": "20"}, "api": "anthropic",
   "code": "...", "stopReason": "error", "stopDetails": "refusal", "observableOutput": false}
(all but message optional) and writes one verdict line each:
  {"retryable": true, "class": "transient", "retryAfterMs": 20000, "reason": "..."}
`)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agentd classify: unexpected argument %q: the errors come on stdin (agentd classify -h)\n", fs.Arg(0))
		return 2
	}
	if f, ok := stdin.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintln(stderr, "agentd classify: reading provider errors as JSON lines from the terminal (one per line; Ctrl-D ends; agentd classify -h)")
		}
	}
	if err := runClassify(stdin, stdout, time.Now); err != nil {
		fmt.Fprintln(stderr, "agentd classify:", err)
		return 1
	}
	return 0
}

// versionLine names the build: the module version, or the VCS revision a
// source build records.
func versionLine() string {
	v, rev, dirty := "(devel)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	line := "agentd " + v
	if rev != "" {
		line += " " + rev[:min(12, len(rev))]
		if dirty {
			line += "-dirty"
		}
	}
	return line + " " + runtime.Version()
}
