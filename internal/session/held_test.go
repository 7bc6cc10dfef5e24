package session

import (
	"testing"
	"time"
	"unsafe"

	"github.com/agentd/agentd/internal/provider"
)

// What a log or the in-process store holds gives back the event exactly,
// whatever its type and fields; a delta is held compact, anything else
// whole.
func TestHeldEventGivesBackTheEvent(t *testing.T) {
	at := time.Now() // with its monotonic reading, as a log stamps it
	cost := 0.5
	evs := []struct {
		e       Event
		compact bool
	}{
		{Event{SessionID: "ses_a", Seq: 3, Time: at, Type: EventMessageUpdate, PromptID: "p", TextDelta: "hi"}, true},
		{Event{SessionID: "ses_a", Seq: 4, Time: at, Type: EventMessageUpdate, PromptID: "p", ThinkingDelta: "hmm"}, true},
		{Event{SessionID: "ses_a", Seq: 5, Time: at, Type: EventMessageUpdate, PromptID: "p",
			ToolCallDelta: &ToolCallDelta{CallID: "c", Name: "n", InputDelta: "{"}}, true},
		// A delta with a field the compact form has no room for, or of
		// another session, is held whole.
		{Event{SessionID: "ses_a", Seq: 6, Time: at, Type: EventMessageUpdate, PromptID: "p", TextDelta: "x", Model: "m"}, false},
		{Event{SessionID: "ses_b", Seq: 7, Time: at, Type: EventMessageUpdate, PromptID: "p", TextDelta: "x"}, false},
		{Event{SessionID: "ses_a", Seq: 8, Time: at, Type: EventMessageEnd, PromptID: "p", StopReason: "stop",
			Usage: &provider.Usage{InputTokens: 1}, CostUSD: &cost}, false},
		{Event{SessionID: "ses_a", Seq: 9, Time: at, Type: EventPromptEnd, PromptID: "p", Outcome: OutcomeCompleted}, false},
	}
	for _, c := range evs {
		h := holdEvent("ses_a", &c.e)
		if got := h.event("ses_a"); got != c.e {
			t.Errorf("%s seq %d: held and given back as %+v, want %+v", c.e.Type, c.e.Seq, got, c.e)
		}
		if (h.full == nil) != c.compact {
			t.Errorf("%s seq %d: held compact %v, want %v", c.e.Type, c.e.Seq, h.full == nil, c.compact)
		}
		if h.seq != c.e.Seq || h.typ != c.e.Type {
			t.Errorf("%s seq %d: held as seq %d type %q", c.e.Type, c.e.Seq, h.seq, h.typ)
		}
	}
	if n, e := unsafe.Sizeof(heldEvent{}), unsafe.Sizeof(Event{}); n*3 > e {
		t.Errorf("a held event is %d bytes, an Event %d: not the quarter it is meant to be", n, e)
	}
}
