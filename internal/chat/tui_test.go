package chat

import (
	"context"
	"strings"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	tea "github.com/charmbracelet/bubbletea"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func idleSession(id string) *agentdv1.Session {
	return &agentdv1.Session{Id: id, Model: "sim/echo", Status: "idle"}
}

// prompt types text and presses enter.
func (d *driver) prompt(text string) {
	d.typeText(text)
	d.key(tea.KeyEnter)
}

// TestTUIEscCancelsRetry: Esc during the retry loader calls AbortRetry (once),
// the countdown follows the injected clock, and Esc does nothing when no
// retry is in progress.
func TestTUIEscCancelsRetry(t *testing.T) {
	api := newFakeAPI()
	st := newFakeStream(seq(evAgentStart(), evMessageStart("sim/echo"), evMessageEnd("error", "529 overloaded_error: Overloaded", ""), evAgentEnd(),
		evRetryStart(2, 10, 3000, "529 overloaded_error: Overloaded"))...)
	api.prompts <- st
	d := newDriver(t, NewModel(context.Background(), api, idleSession("ses_1"), nil))
	d.send(tea.WindowSizeMsg{Width: 100, Height: 30})

	d.key(tea.KeyEsc) // idle: nothing
	d.prompt("hi [[faults: 529,529,ok]]")
	d.until("the retry loader", func() bool {
		return d.m.r.Waiting() && d.printedLine("[retry 2/10 in 3s: 529 overloaded_error: Overloaded]")
	})
	if view := d.m.View(); !strings.Contains(view, "Retrying (2/10) in 3s… (esc to cancel)") {
		t.Fatalf("view:\n%s", view)
	}
	d.now = t0.Add(1200 * time.Millisecond)
	d.send(tickMsg(d.now))
	if view := d.m.View(); !strings.Contains(view, "Retrying (2/10) in 1.8s… (esc to cancel)") {
		t.Fatalf("view after 1.2s:\n%s", view)
	}
	if !d.printedLine("> hi [[faults: 529,529,ok]]") {
		t.Errorf("printed %q", d.m.Lines())
	}
	if n := api.count("AbortRetry"); n != 0 {
		t.Fatalf("AbortRetry called %d times before Esc", n)
	}

	d.key(tea.KeyEsc)
	d.until("AbortRetry", func() bool { return api.count("AbortRetry") == 1 })
	d.key(tea.KeyEsc) // already cancelling: not again
	if view := d.m.View(); !strings.Contains(view, "Cancelling the retry…") {
		t.Errorf("view while cancelling:\n%s", view)
	}

	st.events <- &agentdv1.Event{Seq: 6, Type: "auto_retry_end", PromptId: "prm_1", Payload: evRetryEnd(false, 2, "Retry cancelled").Payload}
	st.events <- &agentdv1.Event{Seq: 7, Type: "prompt_end", PromptId: "prm_1", Payload: evPromptEnd("aborted", "Retry cancelled").Payload}
	close(st.events)
	d.until("the prompt's end", func() bool { return d.m.stream == nil && d.printedLine("Prompt aborted: Retry cancelled") })
	if !d.printedLine("Retry failed after 2 attempts: Retry cancelled") {
		t.Errorf("printed %q", d.m.Lines())
	}
	if view := d.m.View(); strings.Contains(view, "Retrying") || strings.Contains(view, "Working") {
		t.Errorf("view after the prompt:\n%s", view)
	}
	d.key(tea.KeyEsc) // idle again: nothing
	if n := api.count("AbortRetry"); n != 1 {
		t.Errorf("AbortRetry called %d times, want 1", n)
	}
}

// TestTUIEscOnlyWhileRetrying: Esc while a prompt streams without a retry
// chain does not call AbortRetry.
func TestTUIEscOnlyWhileRetrying(t *testing.T) {
	api := newFakeAPI()
	st := newFakeStream(seq(evAgentStart(), evMessageStart("sim/echo"), evText("echo: "))...)
	api.prompts <- st
	d := newDriver(t, NewModel(context.Background(), api, idleSession("ses_1"), nil))
	d.prompt("hi")
	d.until("streamed text", func() bool { return len(d.m.partial) > 0 })
	d.key(tea.KeyEsc)
	if view := d.m.View(); !strings.Contains(view, "echo: ") || !strings.Contains(view, "Working… (ctrl+c to abort)") {
		t.Errorf("view:\n%s", view)
	}
	st.events <- &agentdv1.Event{Seq: 4, Type: "message_update", PromptId: "prm_1", Payload: evText("hi\nsecond line").Payload}
	st.events <- &agentdv1.Event{Seq: 5, Type: "prompt_end", PromptId: "prm_1", Payload: evPromptEnd("completed", "").Payload}
	close(st.events)
	d.until("the prompt's end", func() bool { return d.m.stream == nil })
	if !d.printedLine("echo: hi") || !d.printedLine("second line") {
		t.Errorf("printed %q", d.m.Lines())
	}
	if n := api.count("AbortRetry"); n != 0 {
		t.Errorf("AbortRetry called %d times", n)
	}
}

// TestTUICtrlC: Ctrl+C aborts a running prompt, a second one quits; when
// idle Ctrl+C quits.
func TestTUICtrlC(t *testing.T) {
	api := newFakeAPI()
	st := newFakeStream(seq(evAgentStart(), evMessageStart("sim/echo"))...)
	api.prompts <- st
	d := newDriver(t, NewModel(context.Background(), api, idleSession("ses_1"), nil))
	d.prompt("hang")
	d.until("the prompt running", func() bool { return d.m.started })
	d.key(tea.KeyCtrlC)
	d.until("Abort", func() bool { return api.count("Abort") == 1 })
	if view := d.m.View(); !strings.Contains(view, "Aborting… (ctrl+c again to quit)") {
		t.Errorf("view:\n%s", view)
	}
	st.events <- &agentdv1.Event{Seq: 3, Type: "prompt_end", PromptId: "prm_1", Payload: evPromptEnd("aborted", "aborted").Payload}
	d.until("the prompt's end", func() bool { return d.m.stream == nil })
	if !d.printedLine("Prompt aborted.") || d.quit {
		t.Fatalf("printed %q, quit %v", d.m.Lines(), d.quit)
	}
	d.key(tea.KeyCtrlC) // idle: quits
	d.until("quit", func() bool { return d.quit })
	if d.m.View() != "" {
		t.Errorf("view after quitting: %q", d.m.View())
	}

	// Ctrl+C before the prompt reached agentd: Abort at its first event.
	api3 := newFakeAPI()
	st3 := newFakeStream()
	api3.prompts <- st3
	d3 := newDriver(t, NewModel(context.Background(), api3, idleSession("ses_3"), nil))
	d3.prompt("early")
	d3.key(tea.KeyCtrlC)
	if n := api3.count("Abort"); n != 0 || d3.quit {
		t.Fatalf("Abort sent %d times before the prompt started; quit %v", n, d3.quit)
	}
	st3.events <- seq(evAgentStart())[0]
	d3.until("Abort", func() bool { return api3.count("Abort") == 1 })

	// A second Ctrl+C while the abort is pending quits.
	api2 := newFakeAPI()
	api2.prompts <- newFakeStream(seq(evAgentStart())...)
	d2 := newDriver(t, NewModel(context.Background(), api2, idleSession("ses_2"), nil))
	d2.prompt("hang")
	d2.until("the prompt running", func() bool { return d2.m.started })
	d2.key(tea.KeyCtrlC)
	d2.key(tea.KeyCtrlC)
	d2.until("quit", func() bool { return d2.quit })
}

// TestTUIToolResult: a tool call asks for its result; enter submits it, and
// a refusal is shown.
func TestTUIToolResult(t *testing.T) {
	api := newFakeAPI()
	api.toolErr = status.Error(codes.FailedPrecondition, "session is not waiting for tool results")
	st := newFakeStream(seq(evAgentStart(), evMessageStart("sim/echo"), evMessageEnd("toolUse", "", ""), evToolCall("call_1", "get_weather"))...)
	api.prompts <- st
	d := newDriver(t, NewModel(context.Background(), api, idleSession("ses_1"), nil))
	d.prompt("weather?")
	d.until("the tool call", func() bool {
		return len(d.m.tools) == 1 && d.printedLine(`Tool call get_weather {"city":"Paris","days":2} [call_1]`)
	})
	if view := d.m.View(); !strings.Contains(view, "Waiting for the result of get_weather [call_1]") {
		t.Errorf("view:\n%s", view)
	}
	d.prompt("sunny")
	d.until("the refusal", func() bool {
		return d.printedLine("Tool result for get_weather [call_1] not accepted: session is not waiting for tool results")
	})
	if api.count("SubmitToolResults call_1=sunny") != 1 || !d.printedLine("Tool result get_weather [call_1]: sunny") {
		t.Errorf("calls %q printed %q", api.calls, d.m.Lines())
	}
}

// viewText is the view with trailing blanks trimmed from its lines.
func viewText(m *Model) string {
	lines := strings.Split(m.View(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// TestTUIResize: the conversation re-wraps to the terminal's size, and sits
// on the status line and the input.
func TestTUIResize(t *testing.T) {
	api := newFakeAPI()
	api.prompts <- newFakeStream(seq(evAgentStart(), evMessageStart("sim/echo"), evText("one two three four five six"))...)
	d := newDriver(t, NewModel(context.Background(), api, idleSession("ses_1"), nil))
	d.send(tea.WindowSizeMsg{Width: 12, Height: 10})
	d.prompt("x")
	d.until("streamed text", func() bool { return len(d.m.partial) > 0 })
	want := "\n\n> x\none two\nthree four\nfive six\n⣾ Working…\n(ctrl+c to\nabort)\n> type a…"
	if got := viewText(d.m); got != want {
		t.Errorf("view at 12x10:\n%s\nwant:\n%s", got, want)
	}
	d.send(tea.WindowSizeMsg{Width: 40, Height: 5})
	want = "\n> x\none two three four five six\n⣾ Working… (ctrl+c to abort)\n> type a prompt, enter to send"
	if got := viewText(d.m); got != want {
		t.Errorf("view at 40x5:\n%s\nwant:\n%s", got, want)
	}
	// Scrolled up, the view stays put and says so; pgdn goes back.
	d.send(tea.WindowSizeMsg{Width: 40, Height: 3})
	d.key(tea.KeyPgUp)
	if got := viewText(d.m); !strings.Contains(got, "(pgdn for more)") {
		t.Errorf("scrolled view:\n%s", got)
	}
	d.key(tea.KeyPgDown)
	if got := viewText(d.m); strings.Contains(got, "(pgdn for more)") || !strings.HasPrefix(got, "one two three four five six\n") {
		t.Errorf("view after pgdn:\n%s", got)
	}
}

// TestTUIAgainstServer drives the model against a real agentd: a retry
// waits, Esc cancels it ("Retry cancelled"); a hanging prompt is aborted
// with Ctrl+C; a tool call is answered; attaching to a running session
// follows its prompt.
func TestTUIAgainstServer(t *testing.T) {
	addr := startServer(t, testConfig)
	api := dialAPI(t, addr)
	ctx := testContext(t)
	sess, err := api.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo", Tools: []*agentdv1.Tool{{Name: "get_weather"}}})
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, NewModel(ctx, api, sess, nil))

	d.prompt("wait [[faults: 529:retry-after=30,ok]]")
	d.until("the retry loader", d.m.r.Waiting)
	if view := d.m.View(); !strings.Contains(view, "Retrying (1/10) in 30s… (esc to cancel)") {
		t.Fatalf("view:\n%s", view)
	}
	d.key(tea.KeyEsc)
	d.until("the prompt's end", func() bool { return d.m.stream == nil })
	for _, want := range []string{
		"> wait [[faults: 529:retry-after=30,ok]]",
		"[retry 1/10 in 30s: 529 overloaded_error: Overloaded]",
		"Retry failed after 1 attempt: Retry cancelled",
		"Prompt aborted: Retry cancelled",
	} {
		if !d.printedLine(want) {
			t.Errorf("no line %q in %q", want, d.m.Lines())
		}
	}

	d.prompt("hang [[faults: hang]]")
	d.until("the prompt running", func() bool { return d.m.started })
	d.key(tea.KeyCtrlC)
	d.until("the aborted prompt's end", func() bool { return d.m.stream == nil })
	if !d.printedLine("Prompt aborted.") {
		t.Errorf("printed %q", d.m.Lines())
	}

	d.prompt("weather? [[tools: get_weather]]")
	d.until("the tool call", func() bool { return len(d.m.tools) == 1 })
	d.prompt("sunny")
	d.until("the answer", func() bool { return d.m.stream == nil })
	if !d.printedLine("echo: weather? (tools: get_weather=sunny)") {
		t.Errorf("printed %q", d.m.Lines())
	}

	// Another client's prompt runs; a new chat attaches and follows it.
	other, err := api.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "slow [[faults: 503:retry-after=30,ok]]"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := other.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetAutoRetryStart() != nil {
			break
		}
	}
	running, err := api.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: sess.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	d2 := newDriver(t, NewModel(ctx, api, running, nil))
	if d2.m.stream == nil || !d2.m.r.Busy() {
		t.Fatal("the attached model does not follow the running prompt")
	}
	// It knows the chain only from events after it attached; Ctrl+C aborts.
	d2.key(tea.KeyCtrlC)
	d2.until("the followed prompt's end", func() bool { return d2.m.stream == nil })
	if !d2.printedLine("Retry failed after 1 attempt: Retry cancelled") {
		t.Errorf("printed %q", d2.m.Lines())
	}
}
