package wire

import (
	"testing"

	"github.com/agentd/agentd/internal/provider"
)

// Deltas of blocks that interleave (as an OpenAI stream's reasoning and
// message items, or two tool calls, may) go to their own blocks, whatever
// the block looked up last was.
func TestAccInterleavedBlocks(t *testing.T) {
	var deltas []provider.Delta
	a := NewAcc("m", "", func(d provider.Delta) { deltas = append(deltas, d) })
	a.AddText("0", "a")
	a.AddThinking("1", "t")
	a.AddText("0", "b")
	a.AddText("0", "c")
	a.AddThinking("1", "u")
	a.AddText("2", "x")
	a.AddText("0", "d")
	got := a.Finish(provider.StopEnd).Message.Content
	want := []provider.Block{{Type: provider.BlockText, Text: "abcd"}, {Type: provider.BlockThinking, Text: "tu"}, {Type: provider.BlockText, Text: "x"}}
	if len(got) != len(want) {
		t.Fatalf("blocks %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Type != want[i].Type || got[i].Text != want[i].Text {
			t.Errorf("block %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(deltas) != 7 {
		t.Errorf("%d deltas delivered, want 7", len(deltas))
	}
}
