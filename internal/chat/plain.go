package chat

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

// abortTimeout bounds the Abort sent when the client is interrupted.
const abortTimeout = 10 * time.Second

// RunPlain is the non-terminal mode: it reads prompts from in, one a line
// (blank lines are skipped), runs each to its prompt_end and prints plain
// lines to out: "> prompt", the answer as it streams, one line per retry
// event. When the model calls a tool, the next input line is its result (a
// leading "!" marks an error result). It returns ExitOK at the end of the
// input, ExitError when agentd cannot be reached (or refuses the session or
// the token), ExitInterrupted when ctx ends (the running prompt is aborted).
func RunPlain(ctx context.Context, api API, sessionID string, in io.Reader, out, errOut io.Writer) int {
	lines := make(chan string)
	readErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), 8<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
		readErr <- sc.Err()
		close(lines)
	}()

	r := &Renderer{}
	write := func(p []Piece) { io.WriteString(out, String(p)) } //nolint:errcheck // best effort, like a terminal
	for {
		var text string
		select {
		case <-ctx.Done():
			fmt.Fprintln(errOut, "agentd chat: interrupted")
			return ExitInterrupted
		case l, ok := <-lines:
			if !ok {
				if err := <-readErr; err != nil {
					fmt.Fprintf(errOut, "agentd chat: reading prompts: %v\n", err)
					return ExitError
				}
				return ExitOK
			}
			text = strings.TrimRight(l, "\r")
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		write(r.Line(KindUser, "> "+text))
		st := openPrompt(ctx, api, sessionID, text)
		for {
			it, err := st.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				write(r.Reset())
				switch {
				case ctx.Err() != nil:
					// Interrupted: stop the prompt (sent, if not yet started).
					actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
					abortPrompt(actx, api, sessionID) //nolint:errcheck // the process is ending
					cancel()
					fmt.Fprintln(errOut, "agentd chat: interrupted")
					return ExitInterrupted
				case fatal(err) || st.Started():
					fmt.Fprintf(errOut, "agentd chat: %s\n", errText(err))
					return ExitError
				default:
					write(r.Line(KindError, "Prompt refused: "+errText(err)))
				}
				break
			}
			if it.Notice != "" {
				write(r.Line(KindInfo, it.Notice))
				continue
			}
			write(r.Apply(it.Event, time.Now()))
			if call := it.Event.GetToolCall(); call != nil {
				// The next input line is the tool's result.
				res := &agentdv1.ToolResult{CallId: call.GetCallId()}
				select {
				case l, ok := <-lines:
					res.Content = strings.TrimRight(l, "\r")
					if !ok {
						res.Content, res.IsError = "no result: the input of agentd chat ended", true
					} else if rest, isErr := strings.CutPrefix(res.Content, "!"); isErr {
						res.Content, res.IsError = rest, true
					}
				case <-ctx.Done():
					continue // Next returns the interruption
				}
				write(r.Line(KindTool, ToolResultText(call, res)))
				if err := submitToolResult(ctx, api, sessionID, res); err != nil {
					write(r.Line(KindError, fmt.Sprintf("Tool result for %s [%s] not accepted: %s", call.GetName(), call.GetCallId(), errText(err))))
				}
			}
		}
	}
}

// abortPrompt aborts what runs in the session; it returns when the prompt
// has ended.
func abortPrompt(ctx context.Context, api API, sessionID string) error {
	_, err := api.Abort(ctx, &agentdv1.AbortRequest{SessionId: sessionID})
	return err
}

// submitToolResult sends one tool result.
func submitToolResult(ctx context.Context, api API, sessionID string, res *agentdv1.ToolResult) error {
	ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	_, err := api.SubmitToolResults(ctx, &agentdv1.SubmitToolResultsRequest{SessionId: sessionID, Results: []*agentdv1.ToolResult{res}})
	return err
}
