package chat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/spinner"
	"github.com/charmbracelet/bubbles/textinput"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
)

// tickEvery paces the spinner and the retry countdown while a prompt runs.
const tickEvery = 100 * time.Millisecond

// rpcTimeout bounds AbortRetry and SubmitToolResults.
const rpcTimeout = 10 * time.Second

// maxPartial is where a streamed line without a newline is broken for the
// display (the transcript keeps it whole), so that each delta re-wraps a
// bounded amount of text.
const maxPartial = 4096

// HelpText lists the key bindings.
const HelpText = "enter: send · esc: cancel a retry · ctrl+c: abort the prompt (idle: quit) · ctrl+d: quit · pgup/pgdn, ↑/↓: scroll"

// Messages of the model.
type (
	// itemMsg is the next item of the running prompt's stream.
	itemMsg struct {
		id   int
		item Item
	}
	// streamEndMsg: the stream ended (err nil after prompt_end).
	streamEndMsg struct {
		id  int
		err error
	}
	// tickMsg advances the spinner and the countdown.
	tickMsg time.Time
	// abortRetryDoneMsg, abortDoneMsg, toolResultDoneMsg: a command's answer.
	abortRetryDoneMsg struct{ err error }
	abortDoneMsg      struct{ err error }
	toolResultDoneMsg struct {
		call *agentdv1.ToolCall
		err  error
	}
)

// Model is the terminal program (bubbletea, full screen): the conversation
// in a scrolling viewport, under it the status line (the working spinner or
// the retry loader) and the input.
type Model struct {
	api       API
	sessionID string
	ctx       context.Context
	cancel    context.CancelFunc

	r        Renderer
	input    textinput.Model
	vp       viewport.Model
	width    int
	height   int
	stream   *promptStream // the running prompt, nil when idle
	streamID int
	started  bool // an event of the running prompt arrived
	aborting bool // Ctrl+C: Abort sent, or to send at the first event; a second Ctrl+C quits
	cancel1  bool // Esc: AbortRetry sent, until the chain ends
	tools    []*agentdv1.ToolCall
	frame    int
	ticking  bool
	quitting bool
	note     string // a hint under the status line

	lines      []string        // committed logical lines, styled
	partial    []Piece         // the open streamed line
	wrapped    strings.Builder // lines wrapped to wrapWidth
	wrapWidth  int
	nWrapped   int             // how many of lines are in wrapped
	transcript strings.Builder // everything shown, styled, lines unbroken

	// Injected for tests: the clock and the tick command.
	now  func() time.Time
	tick func() tea.Cmd
}

// NewModel returns the program for a session; header is shown first. When
// the session is running a prompt, the program follows it (from the
// session's last seq) first.
func NewModel(ctx context.Context, api API, sess *agentdv1.Session, header []Piece) *Model {
	ctx, cancel := context.WithCancel(ctx)
	in := textinput.New()
	in.Prompt = "> "
	in.Cursor.SetMode(cursor.CursorStatic)
	in.Focus()
	m := &Model{
		api: api, sessionID: sess.GetId(), ctx: ctx, cancel: cancel, input: in,
		vp:   viewport.New(0, 0),
		now:  time.Now,
		tick: func() tea.Cmd { return tea.Tick(tickEvery, func(t time.Time) tea.Msg { return tickMsg(t) }) },
	}
	m.updatePlaceholder()
	m.emit(header)
	if st := sess.GetStatus(); st != "" && st != "idle" {
		m.streamID++
		m.stream = followPrompt(m.ctx, api, m.sessionID, sess.GetLastSeq())
		m.r.busy, m.started = true, true
		m.tools = append(m.tools, sess.GetPendingToolCalls()...)
		m.updatePlaceholder()
		m.emit(m.r.Line(KindInfo, "(following the prompt that runs in this session)"))
	}
	m.layout()
	return m
}

// Close cancels what the model still runs (its stream's RPC).
func (m *Model) Close() { m.cancel() }

// Transcript is everything the program showed, styled, for the normal
// screen after the program ends.
func (m *Model) Transcript() string {
	s := m.transcript.String()
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s
}

// Lines returns the committed lines without styling (for tests).
func (m *Model) Lines() []string {
	out := make([]string, len(m.lines))
	for i, l := range m.lines {
		out[i] = ansi.Strip(l)
	}
	return out
}

// Init starts following a running prompt, if any.
func (m *Model) Init() tea.Cmd {
	if m.stream == nil {
		return nil
	}
	return tea.Batch(m.next(), m.startTicking())
}

// next reads the running stream's next item.
func (m *Model) next() tea.Cmd {
	st, id := m.stream, m.streamID
	return func() tea.Msg {
		it, err := st.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return streamEndMsg{id: id, err: err}
		}
		return itemMsg{id: id, item: it}
	}
}

func (m *Model) startTicking() tea.Cmd {
	if m.ticking {
		return nil
	}
	m.ticking = true
	return m.tick()
}

// Update handles a message.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	cmd := m.update(msg)
	m.layout()
	return m, cmd
}

func (m *Model) update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.input.Width = max(1, msg.Width-len(m.input.Prompt)-1)
		return nil
	case tea.KeyMsg:
		return m.key(msg)
	case itemMsg:
		if msg.id != m.streamID || m.stream == nil {
			return nil
		}
		var abort tea.Cmd
		if !m.started && msg.item.Event != nil {
			m.started = true
			if m.aborting {
				// Ctrl+C came before the prompt reached agentd.
				abort = m.abort()
			}
		}
		if msg.item.Notice != "" {
			m.emit(m.r.Line(KindInfo, msg.item.Notice))
		} else {
			ev := msg.item.Event
			m.emit(m.r.Apply(ev, m.now()))
			switch {
			case ev.GetToolCall() != nil:
				m.tools = append(m.tools, ev.GetToolCall())
				m.updatePlaceholder()
			case ev.GetAutoRetryEnd() != nil:
				m.cancel1 = false
			}
		}
		return tea.Batch(abort, m.next())
	case streamEndMsg:
		if msg.id != m.streamID || m.stream == nil {
			return nil
		}
		started := m.started
		m.stream, m.started, m.aborting, m.cancel1 = nil, false, false, false
		m.tools = nil
		m.updatePlaceholder()
		m.emit(m.r.Reset())
		if msg.err != nil && m.ctx.Err() == nil {
			head := "Prompt refused: "
			switch {
			case started:
				head = "Lost the prompt's events: "
			case fatal(msg.err):
				head = "Prompt not sent: "
			}
			m.emit(m.r.Line(KindError, head+errText(msg.err)))
		}
		return nil
	case tickMsg:
		m.frame++
		if m.stream != nil {
			return m.tick()
		}
		m.ticking = false
		return nil
	case abortRetryDoneMsg:
		if msg.err != nil && m.ctx.Err() == nil {
			m.cancel1 = false
			m.emit(m.r.Line(KindError, "Cancelling the retry failed: "+errText(msg.err)))
		}
		return nil
	case abortDoneMsg:
		if msg.err != nil && m.ctx.Err() == nil {
			m.aborting = false
			m.emit(m.r.Line(KindError, "Abort failed: "+errText(msg.err)))
		}
		return nil
	case toolResultDoneMsg:
		if msg.err != nil && m.ctx.Err() == nil {
			m.emit(m.r.Line(KindError, fmt.Sprintf("Tool result for %s [%s] not accepted: %s",
				msg.call.GetName(), msg.call.GetCallId(), errText(msg.err))))
		}
		return nil
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return cmd
}

func (m *Model) key(k tea.KeyMsg) tea.Cmd {
	m.note = ""
	switch k.Type {
	case tea.KeyCtrlC:
		if m.stream != nil && !m.aborting {
			m.aborting = true
			if !m.started {
				return nil // aborted at the first event
			}
			return m.abort()
		}
		return m.quit()
	case tea.KeyCtrlD:
		if m.input.Value() == "" {
			if m.stream != nil {
				m.note = "a prompt is running: ctrl+c aborts it"
				return nil
			}
			return m.quit()
		}
	case tea.KeyEsc:
		// Esc cancels a retry, and does nothing else.
		if m.stream != nil && m.r.Retrying() && !m.cancel1 {
			m.cancel1 = true
			return m.abortRetry()
		}
		return nil
	case tea.KeyEnter:
		return m.enter()
	case tea.KeyPgUp:
		m.vp.PageUp()
		return nil
	case tea.KeyPgDown:
		m.vp.PageDown()
		return nil
	case tea.KeyUp:
		m.vp.ScrollUp(1)
		return nil
	case tea.KeyDown:
		m.vp.ScrollDown(1)
		return nil
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(k)
	return cmd
}

func (m *Model) enter() tea.Cmd {
	text := m.input.Value()
	if len(m.tools) > 0 {
		call := m.tools[0]
		m.tools = m.tools[1:]
		m.input.Reset()
		m.updatePlaceholder()
		res := &agentdv1.ToolResult{CallId: call.GetCallId(), Content: text}
		if rest, ok := strings.CutPrefix(text, "!"); ok {
			res.Content, res.IsError = rest, true
		}
		m.emit(m.r.Line(KindTool, ToolResultText(call, res)))
		api, id, ctx := m.api, m.sessionID, m.ctx
		return func() tea.Msg {
			return toolResultDoneMsg{call: call, err: submitToolResult(ctx, api, id, res)}
		}
	}
	if m.stream != nil {
		m.note = "a prompt is running: wait for it, or ctrl+c to abort it"
		return nil
	}
	if strings.TrimSpace(text) == "" {
		return nil
	}
	m.input.Reset()
	m.streamID++
	m.stream = openPrompt(m.ctx, m.api, m.sessionID, text)
	m.r.busy = true
	m.vp.GotoBottom()
	m.emit(m.r.Line(KindUser, "> "+text))
	return tea.Batch(m.next(), m.startTicking())
}

func (m *Model) abortRetry() tea.Cmd {
	api, id, ctx := m.api, m.sessionID, m.ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		defer cancel()
		_, err := api.AbortRetry(ctx, &agentdv1.AbortRetryRequest{SessionId: id})
		return abortRetryDoneMsg{err: err}
	}
}

func (m *Model) abort() tea.Cmd {
	api, id, ctx := m.api, m.sessionID, m.ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, abortTimeout)
		defer cancel()
		return abortDoneMsg{err: abortPrompt(ctx, api, id)}
	}
}

func (m *Model) quit() tea.Cmd {
	m.quitting = true
	m.cancel()
	return tea.Quit
}

func (m *Model) updatePlaceholder() {
	if len(m.tools) > 0 {
		c := m.tools[0]
		m.input.Placeholder = fmt.Sprintf("result of %s [%s] (start with ! for an error)", c.GetName(), c.GetCallId())
		return
	}
	m.input.Placeholder = "type a prompt, enter to send"
}

// emit adds output: whole lines are committed, inline pieces extend the open
// line (a "\n" commits it).
func (m *Model) emit(pieces []Piece) {
	for _, p := range pieces {
		if !p.Inline {
			l := style(p.Kind).Render(p.Text)
			m.lines = append(m.lines, l)
			m.transcript.WriteString(l + "\n")
			continue
		}
		parts := strings.Split(p.Text, "\n")
		for i, part := range parts {
			if part != "" {
				m.partial = append(m.partial, Piece{Kind: p.Kind, Text: part, Inline: true})
				m.transcript.WriteString(style(p.Kind).Render(part))
			}
			if i < len(parts)-1 {
				m.lines = append(m.lines, m.renderPartial())
				m.partial = nil
				m.transcript.WriteString("\n")
			}
		}
		if n := partialLen(m.partial); n > maxPartial {
			// Break a long streamed line for the display.
			m.lines = append(m.lines, m.renderPartial())
			m.partial = nil
		}
	}
}

func partialLen(ps []Piece) int {
	n := 0
	for _, p := range ps {
		n += len(p.Text)
	}
	return n
}

func (m *Model) renderPartial() string {
	var b strings.Builder
	for _, p := range m.partial {
		b.WriteString(style(p.Kind).Render(p.Text))
	}
	return b.String()
}

func (m *Model) wrap(s string) string {
	if m.width <= 0 {
		return s
	}
	return ansi.Wrap(s, m.width, "")
}

// layout fits the viewport between the top of the screen and the footer
// (status, note, input), and follows the end of the conversation unless
// the user scrolled up.
func (m *Model) layout() {
	if m.wrapWidth != m.width {
		m.wrapped.Reset()
		m.nWrapped, m.wrapWidth = 0, m.width
	}
	for ; m.nWrapped < len(m.lines); m.nWrapped++ {
		m.wrapped.WriteString(m.wrap(m.lines[m.nWrapped]))
		m.wrapped.WriteByte('\n')
	}
	content := m.wrapped.String()
	if len(m.partial) > 0 {
		content += m.wrap(m.renderPartial()) + "\n"
	}
	content = strings.TrimSuffix(content, "\n")
	follow := m.vp.AtBottom() || m.vp.TotalLineCount() == 0
	m.vp.Width = m.width
	m.vp.Height = max(1, m.height-strings.Count(m.footer(), "\n")-1)
	if n := strings.Count(content, "\n") + 1; n < m.vp.Height {
		// A short conversation sits on the input, as in a terminal.
		content = strings.Repeat("\n", m.vp.Height-n) + content
	}
	m.vp.SetContent(content)
	if follow {
		m.vp.GotoBottom()
	}
}

// Status is the status line: the retry loader while a retry waits, else
// the working spinner while a prompt runs, else "".
func (m *Model) Status() string {
	frame := strings.TrimSpace(spinner.Dot.Frames[m.frame%len(spinner.Dot.Frames)])
	if loader, ok := m.r.Loader(m.now()); ok {
		if m.cancel1 {
			return loaderStyle.Render("Cancelling the retry…")
		}
		return loaderStyle.Render(frame + " " + loader)
	}
	if m.stream == nil {
		return ""
	}
	switch {
	case m.aborting:
		return workingStyle.Render(frame + " Aborting… (ctrl+c again to quit)")
	case len(m.tools) > 0:
		c := m.tools[0]
		return workingStyle.Render(fmt.Sprintf("%s Waiting for the result of %s [%s]: type it, enter sends it", frame, c.GetName(), c.GetCallId()))
	case m.r.Retrying():
		a, n := m.r.Attempt()
		return workingStyle.Render(fmt.Sprintf("%s Working… retry %d/%d (esc cancels the retry, ctrl+c aborts)", frame, a, n))
	default:
		return workingStyle.Render(frame + " Working… (ctrl+c to abort)")
	}
}

func (m *Model) footer() string {
	var b strings.Builder
	if s := m.Status(); s != "" {
		b.WriteString(m.wrap(s) + "\n")
	}
	if m.note != "" {
		b.WriteString(m.wrap(infoStyle.Render(m.note)) + "\n")
	}
	if !m.vp.AtBottom() && m.vp.TotalLineCount() > 0 {
		b.WriteString(infoStyle.Render(fmt.Sprintf("-- %d%% (pgdn for more) --", int(m.vp.ScrollPercent()*100))) + "\n")
	}
	b.WriteString(m.input.View())
	return b.String()
}

// View draws the conversation, the status and the input.
func (m *Model) View() string {
	if m.quitting {
		return ""
	}
	return m.vp.View() + "\n" + m.footer()
}

var (
	loaderStyle  = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
	workingStyle = lipgloss.NewStyle().Foreground(lipgloss.Color("6"))
	infoStyle    = lipgloss.NewStyle().Faint(true)
	styles       = map[Kind]lipgloss.Style{
		KindText:     lipgloss.NewStyle(),
		KindThinking: lipgloss.NewStyle().Faint(true).Italic(true),
		KindUser:     lipgloss.NewStyle().Bold(true),
		KindTool:     lipgloss.NewStyle().Foreground(lipgloss.Color("6")),
		KindRetry:    lipgloss.NewStyle().Foreground(lipgloss.Color("3")),
		KindNotice:   lipgloss.NewStyle().Foreground(lipgloss.Color("5")),
		KindError:    lipgloss.NewStyle().Foreground(lipgloss.Color("1")),
		KindInfo:     infoStyle,
	}
)

func style(k Kind) lipgloss.Style { return styles[k] }

// runTUI runs the terminal program on a session, in the alternate screen;
// when it ends, the conversation is printed to the normal screen.
func runTUI(ctx context.Context, api API, sess *agentdv1.Session, history []*agentdv1.Message, attached bool, stdin io.Reader, stdout, stderr io.Writer) int {
	header := append(Header(sess, history, attached), Piece{Kind: KindInfo, Text: HelpText})
	m := NewModel(ctx, api, sess, header)
	defer m.Close()
	p := tea.NewProgram(m, tea.WithInput(stdin), tea.WithOutput(stdout), tea.WithContext(ctx), tea.WithAltScreen())
	_, err := p.Run()
	m.Close()
	io.WriteString(stdout, m.Transcript()) //nolint:errcheck // the terminal is going away
	if err != nil {
		if errors.Is(err, tea.ErrProgramKilled) || errors.Is(err, tea.ErrInterrupted) {
			return ExitInterrupted
		}
		fmt.Fprintf(stderr, "agentd chat: %v\n", err)
		return ExitError
	}
	return ExitOK
}
