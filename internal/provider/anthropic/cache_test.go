package anthropic

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// mark is where a cache_control mark sits: a message and block index, or
// "tools"/"system".
type mark struct {
	where      string
	msg, block int
}

// sentBody is what the API reads of a request: system, tools and messages
// as raw JSON.
type sentBody struct {
	System   json.RawMessage `json:"system"`
	Tools    []map[string]any
	Messages []struct {
		Role    string           `json:"role"`
		Content []map[string]any `json:"content"`
	} `json:"messages"`
}

func marksOf(t *testing.T, b sentBody) []mark {
	t.Helper()
	var out []mark
	for i, tool := range b.Tools {
		if tool["cache_control"] != nil {
			out = append(out, mark{where: fmt.Sprintf("tool %d", i)})
		}
	}
	var sys []map[string]any
	if json.Unmarshal(b.System, &sys) == nil {
		for _, s := range sys {
			if s["cache_control"] != nil {
				out = append(out, mark{where: "system"})
			}
		}
	}
	for i, m := range b.Messages {
		for j, blk := range m.Content {
			if cc, ok := blk["cache_control"].(map[string]any); ok {
				if cc["type"] != "ephemeral" {
					t.Errorf("message %d block %d: cache_control %v", i, j, cc)
				}
				out = append(out, mark{where: "messages", msg: i, block: j})
			}
		}
	}
	return out
}

// unmarked is the messages up to and including message last with the
// marks taken out: the prefix the cache is keyed on.
func unmarked(b sentBody, last int) string {
	var msgs []any
	for _, m := range b.Messages[:last+1] {
		var blocks []map[string]any
		for _, blk := range m.Content {
			c := map[string]any{}
			for k, v := range blk {
				if k != "cache_control" {
					c[k] = v
				}
			}
			blocks = append(blocks, c)
		}
		msgs = append(msgs, map[string]any{"role": m.Role, "content": blocks})
	}
	out, _ := json.Marshal(msgs)
	return string(out)
}

// An agent loop with tools over several prompts: every request has at most
// four marks — the tools, the system prompt and the last two user turns —
// and the last mark of each request is marked again, on the same content,
// in the next one, so the prefix one call writes is the prefix the next
// reads.
func TestCacheBreakpointsStableAcrossTurns(t *testing.T) {
	s := newServer(t, providertest.Options{NoReasoningChecks: true})
	c := newClient(t, Options{BaseURL: s.URL})
	req := request()
	req.System = "You are a careful assistant."
	req.Tools = []provider.Tool{{Name: "get_weather"}, {Name: "get_time"}}
	user := func(text string) provider.Message {
		return provider.Message{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: text}}}
	}
	turns := [][]provider.Message{
		nil, // the first prompt: "hi"
		{{Role: provider.RoleAssistant, StopReason: provider.StopToolUse, Content: []provider.Block{
			{Type: provider.BlockText, Text: "checking"},
			{Type: provider.BlockToolCall, ToolCallID: "toolu_1", ToolName: "get_weather", ToolInput: json.RawMessage(`{"city":"Paris"}`)}}},
			{Role: provider.RoleTool, Content: []provider.Block{{Type: provider.BlockToolResult, ToolCallID: "toolu_1", Text: "sunny"}}}},
		{{Role: provider.RoleAssistant, Content: []provider.Block{{Type: provider.BlockText, Text: "It is sunny."}}}, user("and the time?")},
		{{Role: provider.RoleAssistant, StopReason: provider.StopToolUse, Content: []provider.Block{
			{Type: provider.BlockThinking, Text: "hm", Signature: "sig"},
			{Type: provider.BlockToolCall, ToolCallID: "toolu_2", ToolName: "get_time"}}},
			{Role: provider.RoleTool, Content: []provider.Block{{Type: provider.BlockToolResult, ToolCallID: "toolu_2", Text: "noon"}}}},
		{{Role: provider.RoleAssistant, Content: []provider.Block{{Type: provider.BlockText, Text: "Noon."}}}, user("thanks")},
	}
	var bodies []sentBody
	for i, more := range turns {
		req.Messages = append(req.Messages, more...)
		if res, _ := streamT(t, c, req); res.Message.StopReason != provider.StopEnd {
			t.Fatalf("call %d: %+v", i, res.Message)
		}
		reqs, err := s.WaitRequests(testkit.Context(t), i+1)
		if err != nil {
			t.Fatal(err)
		}
		var b sentBody
		if err := reqs[i].JSON(&b); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	for i, b := range bodies {
		marks := marksOf(t, b)
		if len(marks) > MaxCacheBreakpoints {
			t.Errorf("request %d: %d cache marks, the API takes %d: %v", i, len(marks), MaxCacheBreakpoints, marks)
		}
		if !slices.Contains(marks, mark{where: "tool 1"}) || !slices.Contains(marks, mark{where: "system"}) {
			t.Errorf("request %d: marks %v, want the last tool and the system prompt", i, marks)
		}
		last := marks[len(marks)-1]
		if b.Messages[last.msg].Role != "user" || last.msg != len(b.Messages)-1 {
			t.Errorf("request %d: last mark %v is not on the last (user) turn", i, last)
		}
		if i == 0 {
			continue
		}
		// The previous request's last mark: marked again, same prefix.
		prev := marksOf(t, bodies[i-1])
		pl := prev[len(prev)-1]
		if !slices.Contains(marks, pl) {
			t.Errorf("request %d: marks %v lost the previous request's last mark %v: the prefix it wrote is not read", i, marks, pl)
		}
		if got, want := unmarked(b, pl.msg), unmarked(bodies[i-1], pl.msg); got != want {
			t.Errorf("request %d: the prefix through the previous last mark changed:\n got %s\nwant %s", i, got, want)
		}
	}
}

// Turned off, a request carries no mark and a plain system string.
func TestCacheBreakpointsOff(t *testing.T) {
	req := request()
	req.Tools = []provider.Tool{{Name: "t"}}
	body, _ := json.Marshal(New(Options{NoPromptCache: true}).requestBody(req))
	var b sentBody
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatal(err)
	}
	if m := marksOf(t, b); len(m) != 0 || string(b.System) != `"be brief"` {
		t.Errorf("marks %v, system %s: want none and a string", m, b.System)
	}
}
