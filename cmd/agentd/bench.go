package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentd/agentd/internal/bench"
)

// The bench asks the agentd it starts for profiles and heap statistics:
// `agentd serve` opens a loopback debug listener when AGENTD_BENCH_DEBUG_ADDR
// is set (never otherwise).
func init() {
	addr := os.Getenv(bench.DebugEnv)
	if addr == "" || len(os.Args) < 2 || os.Args[1] != "serve" {
		return
	}
	if err := bench.ServeDebug(addr, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "agentd: %s: %v\n", bench.DebugEnv, err)
	}
}

const benchUsage = `Usage: agentd bench [flags] [SCENARIO...]

Load tests of agentd against a bare reverse-proxy floor, on loopback: it
starts agentd (this binary, or --agentd), a mock provider and, for the
Redis runs, a redis-server of its own. Scenarios: overhead, capacity,
idle-memory, fanout, retry (default: all, about 10 minutes), each run
--rounds times interleaved; it writes results.json, results.md and pprof
profiles to --out. --store redis or both also runs overhead, capacity,
idle-memory and fanout with agentd on the Redis store (a redis-server of
the bench's own; metrics named "redis.…"). --baseline OLD runs an
earlier agentd binary beside the one under test in overhead, the two's
prompts interleaved in a random order, and reports the added TTFT and
CPU per prompt as ratios to the baseline's: a paired comparison that a
busy machine moves less than two runs. See BENCHMARKS.md.

Flags:
`

// runBench is "agentd bench".
func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	if len(args) > 0 && args[0] == "floor-proxy" {
		return runFloorProxy(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "grpc-floor" {
		return runGRPCFloor(args[1:], stdout, stderr)
	}
	self, _ := os.Executable()
	bin := fs.String("agentd", self, "the agentd binary to test")
	out := fs.String("out", "bench", "output directory")
	rounds := fs.Int("rounds", 3, "runs of each scenario (interleaved)")
	quick := fs.Bool("quick", false, "tiny sizes: a smoke test of the tool (seconds)")
	profile := fs.Bool("profile", true, "collect pprof CPU and heap profiles of agentd in a last pass")
	memBudget := fs.Float64("mem-budget-gib", 8, "stop growing idle sessions or subscribers when agentd's RSS passes this")
	repo := fs.String("repo", "", "module root for the Go benchmarks of internal/retry (default: the current directory when it holds go.mod)")
	version := fs.String("version", "", "label of the agentd under test (default: git describe)")
	baseline := fs.String("baseline", "", "an earlier agentd binary: overhead runs it beside --agentd, their prompts interleaved in a random order, and reports ratios to it")
	baselineVersion := fs.String("baseline-version", "", "label of the baseline in the report")
	store := fs.String("store", "memory", "session store of agentd in overhead, capacity, idle-memory and fanout: memory, redis or both (redis-server on PATH)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var stores []string
	switch *store {
	case bench.StoreMemory, bench.StoreRedis:
		stores = []string{*store}
	case "both":
		stores = []string{bench.StoreMemory, bench.StoreRedis}
	default:
		fmt.Fprintf(stderr, "agentd bench: --store %q: memory, redis or both\n", *store)
		return 2
	}
	if *repo == "" {
		if _, err := os.Stat("go.mod"); err == nil {
			*repo, _ = os.Getwd()
		}
	}
	if *version == "" && *repo != "" {
		if b, err := exec.Command("git", "-C", *repo, "describe", "--always", "--dirty").Output(); err == nil {
			*version = strings.TrimSpace(string(b))
		}
	}
	abs, err := filepath.Abs(*bin)
	if err != nil {
		fmt.Fprintln(stderr, "agentd bench:", err)
		return 2
	}
	if *baseline != "" {
		if *baseline, err = filepath.Abs(*baseline); err != nil {
			fmt.Fprintln(stderr, "agentd bench:", err)
			return 2
		}
		if _, err := os.Stat(*baseline); err != nil {
			fmt.Fprintln(stderr, "agentd bench: --baseline:", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, bench.Config{
		Bin: abs, Out: *out, Rounds: *rounds, Scenarios: fs.Args(), Quick: *quick, Profile: *profile,
		MemBudget: int64(*memBudget * (1 << 30)), RepoDir: *repo, Progress: stderr, Version: *version, Stores: stores,
		Baseline: *baseline, BaselineVersion: *baselineVersion,
	})
	if res != nil {
		fmt.Fprint(stdout, bench.Markdown(res))
		fmt.Fprintf(stdout, "\nresults: %s\n", filepath.Join(*out, "results.json"))
	}
	if err != nil {
		fmt.Fprintln(stderr, "agentd bench:", err)
		return 1
	}
	return 0
}

// runFloorProxy is "agentd bench floor-proxy --target URL" (used by the
// bench itself): the bare httputil.ReverseProxy floor as a process.
func runFloorProxy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench floor-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "", "the URL to proxy to (the mock provider)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the proxy's whole run to this file")
	if err := fs.Parse(args); err != nil || *target == "" {
		fmt.Fprintln(stderr, "usage: agentd bench floor-proxy --target URL [--cpuprofile FILE]")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.RunFloorProxy(ctx, *target, *cpuProfile, stdout); err != nil {
		fmt.Fprintln(stderr, "agentd bench floor-proxy:", err)
		return 1
	}
	return 0
}

// runGRPCFloor is "agentd bench grpc-floor --target URL" (used by the
// bench itself): the bare gRPC relay floor as a process.
func runGRPCFloor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench grpc-floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "", "the mock provider's URL")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the relay's whole run to this file")
	if err := fs.Parse(args); err != nil || *target == "" {
		fmt.Fprintln(stderr, "usage: agentd bench grpc-floor --target URL [--cpuprofile FILE]")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.RunGRPCFloor(ctx, *target, *cpuProfile, stdout); err != nil {
		fmt.Fprintln(stderr, "agentd bench grpc-floor:", err)
		return 1
	}
	return 0
}
