package convert

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/session"
)

// A stream's reused conversion gives, event after event, what EventToProto
// gives: nothing of a delta carries over into the next (a tool call's delta
// before a text delta, a thinking delta before an end), and the events
// around the deltas are converted as they are.
func TestEventsReuseMatchesEventToProto(t *testing.T) {
	at := time.Date(2026, 12, 1, 20, 0, 0, 123456789, time.UTC)
	cost := 0.25
	evs := []session.Event{
		{SessionID: "ses_a", Seq: 1, Time: at, Type: session.EventAgentStart, PromptID: "p1"},
		{SessionID: "ses_a", Seq: 2, Time: at, Type: session.EventMessageStart, PromptID: "p1", Role: "assistant", Model: "sim/echo"},
		{SessionID: "ses_a", Seq: 3, Time: at.Add(time.Millisecond), Type: session.EventMessageUpdate, PromptID: "p1",
			ToolCallDelta: &session.ToolCallDelta{CallID: "c1", Name: "search", InputDelta: `{"q":`}},
		{SessionID: "ses_a", Seq: 4, Time: at.Add(2 * time.Millisecond), Type: session.EventMessageUpdate, PromptID: "p1", TextDelta: "hello"},
		{SessionID: "ses_a", Seq: 5, Time: at.Add(3 * time.Millisecond), Type: session.EventMessageUpdate, PromptID: "p1", ThinkingDelta: "hmm"},
		{SessionID: "ses_a", Seq: 6, Time: at.Add(4 * time.Millisecond), Type: session.EventMessageUpdate, PromptID: "p1"},
		{SessionID: "ses_a", Seq: 7, Time: at, Type: session.EventMessageEnd, PromptID: "p1", StopReason: "stop",
			Usage: &provider.Usage{InputTokens: 3, OutputTokens: 5}, CostUSD: &cost},
		{SessionID: "ses_b", Seq: 1, Time: time.Time{}, Type: session.EventMessageUpdate, PromptID: "p2", TextDelta: "other"},
		{SessionID: "ses_a", Seq: 8, Time: at, Type: session.EventPromptEnd, PromptID: "p1", Outcome: session.OutcomeCompleted},
	}
	var b Events
	for i := range evs {
		got, want := b.Proto(&evs[i]), EventToProto(&evs[i])
		if !proto.Equal(got, want) {
			t.Errorf("event %d (%s): reused %v, want %v", i, evs[i].Type, got, want)
		}
	}
}

// A delta after a delta allocates nothing.
func TestEventsDeltaAllocatesNothing(t *testing.T) {
	e := session.Event{SessionID: "ses_a", Seq: 9, Time: time.Now(), Type: session.EventMessageUpdate, PromptID: "p1", TextDelta: "x"}
	var b Events
	var sink int
	if n := testing.AllocsPerRun(100, func() { sink += len(b.Proto(&e).GetMessageUpdate().GetTextDelta()) }); n != 0 {
		t.Fatalf("a delta's conversion: %v allocations, want 0", n)
	}
	if sink == 0 {
		t.Fatal("no delta converted")
	}
}

// Any other event reuses the event and its time: only its payload is
// allocated (the wrapper and the message).
func TestEventsOtherEventAllocatesItsPayloadOnly(t *testing.T) {
	e := session.Event{SessionID: "ses_a", Seq: 1, Time: time.Now(), Type: session.EventAgentStart, PromptID: "p1"}
	var b Events
	var sink int
	if n := testing.AllocsPerRun(100, func() { sink += len(b.Proto(&e).GetAgentStart().GetPromptId()) }); n > 2 {
		t.Fatalf("agent_start's conversion: %v allocations, want at most 2", n)
	}
	if sink == 0 {
		t.Fatal("no agent_start converted")
	}
}
