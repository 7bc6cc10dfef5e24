package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/agentd/agentd/internal/chat"
	"github.com/charmbracelet/x/term"
)

const chatUsage = `Usage: agentd chat [--addr ADDR] [--token T] [--session ID | --model PROVIDER/MODEL] [--tool NAME]... [--plain]

A session in the terminal: type a prompt, watch the answer stream and the
retry engine work. Keys: enter sends (or, when a tool call waits, sends its
result; a leading ! marks an error); esc cancels a retry; ctrl+c aborts the
running prompt (when idle, or pressed again, quits); ctrl+d quits;
pgup/pgdn and the arrows scroll. When stdin or stdout is not a terminal,
prompts are read line by line from stdin (a tool call takes the next line
as its result) and the output is plain lines: agentd chat < prompts.txt > log.
The token also comes from $AGENTD_TOKEN.

Flags:
`

// runChat is "agentd chat".
func runChat(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, chatUsage)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", chat.DefaultAddr, "agentd's gRPC address")
	token := fs.String("token", "", "bearer token (default $AGENTD_TOKEN)")
	session := fs.String("session", "", "attach to this session (shows its recent history)")
	model := fs.String("model", "", "model of a new session, provider/model (default "+chat.DefaultModel+")")
	plain := fs.Bool("plain", false, "plain line output even on a terminal")
	var tools []string
	fs.Func("tool", "declare a client-executed tool NAME on the new session (repeatable); you type its results", func(s string) error {
		for t := range strings.SplitSeq(s, ",") {
			if t = strings.TrimSpace(t); t != "" {
				tools = append(tools, t)
			}
		}
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agentd chat: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *session != "" && (*model != "" || len(tools) > 0) {
		fmt.Fprintln(stderr, "agentd chat: --session attaches to an existing session; --model and --tool are for a new one")
		return 2
	}
	if *token == "" {
		*token = os.Getenv("AGENTD_TOKEN")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return chat.Run(ctx, chat.Options{
		Addr:        *addr,
		Token:       *token,
		SessionID:   *session,
		Model:       *model,
		Tools:       tools,
		Interactive: !*plain && isTerminal(stdin) && isTerminal(stdout),
	}, stdin, stdout, stderr)
}

// isTerminal reports whether f is a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(file.Fd())
}
