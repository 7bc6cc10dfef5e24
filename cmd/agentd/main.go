// Command agentd hosts concurrent LLM agent sessions and keeps them alive
// through the failures of the providers behind them.
//
//	agentd serve [--config FILE] [--grpc-addr ADDR] [--http-addr ADDR]
//	agentd classify < errors.jsonl
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
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/server"
)

const usage = `agentd hosts LLM agent sessions that survive provider failures.

Usage:
  agentd serve [--config FILE] [--grpc-addr ADDR] [--http-addr ADDR] [--log-format auto|json|text]
  agentd classify     read provider errors as JSON lines on stdin, print retry verdicts
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
		if err := runClassify(stdin, stdout, time.Now); err != nil {
			fmt.Fprintln(stderr, "agentd classify:", err)
			return 1
		}
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

	cfg := config.Default()
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			fmt.Fprintf(stderr, "agentd serve: %v\n", err)
			return 1
		}
	}
	if *grpcAddr != "" {
		cfg.Listen.GRPC = *grpcAddr
	}
	if *httpAddr != "" {
		cfg.Listen.HTTP = *httpAddr
	}
	srv, err := server.New(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "agentd serve: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := srv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("agentd stopped with an error", "err", err)
		return 1
	}
	return 0
}
