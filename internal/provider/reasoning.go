package provider

// Reasoning state is what a provider needs, beside the visible thinking
// text, to accept a model's earlier reasoning back: an Anthropic thinking
// block's signature, a redacted_thinking block's data, an OpenAI Responses
// reasoning item's id and encrypted content. The providers store it
// byte-exact in the assistant message they return and send it back in
// later requests of the same kind. Providers bind it to where it was made:
// Anthropic refuses a signature made for another model or account ("Invalid
// `signature` in `thinking` block"), OpenAI encrypted content made for
// another organisation ("The encrypted content … could not be verified");
// retry classifies both as a stale replay (stale reasoning). A session that
// switches model, provider or account strips the state that the target
// would refuse (StripForeignReasoning), which the blocks' Origin tells.
//
// A failed or aborted call never leaves replayable state in its message:
// the providers strip it from every result that is not a success (a
// thinking block cut before its signature, or reasoning of a turn that will
// be retried, is never replayed); the thinking text stays, for display.

// Origin is where an assistant block was produced. Providers leave it empty
// and never send it on the wire; the session fills it after a call
// (Message.SetOrigin) so that it can tell, on a switch, which reasoning
// state the next call's provider would refuse.
type Origin struct {
	// Provider is the provider the session called (its configured name).
	Provider string `json:"provider,omitempty"`
	// Model is the model that answered.
	Model string `json:"model,omitempty"`
	// Account is the account (organisation) of the credential used.
	Account string `json:"account,omitempty"`
}

// IsZero reports whether o says nothing.
func (o Origin) IsZero() bool { return o == Origin{} }

// Matches reports whether a block of origin o may be replayed to target:
// every field set in o equals target's (a field o leaves empty is unknown
// and not compared).
func (o Origin) Matches(target Origin) bool {
	return (o.Provider == "" || o.Provider == target.Provider) &&
		(o.Model == "" || o.Model == target.Model) &&
		(o.Account == "" || o.Account == target.Account)
}

// SetOrigin sets o as the origin of every block of m that has none.
func (m *Message) SetOrigin(o Origin) {
	for i := range m.Content {
		if m.Content[i].Origin.IsZero() {
			m.Content[i].Origin = o
		}
	}
}

// HasReasoningState reports whether b carries state a provider would want
// back: a signature, redacted data, a reasoning item id or encrypted
// content.
func (b *Block) HasReasoningState() bool {
	switch b.Type {
	case BlockRedactedThinking:
		return true
	case BlockThinking:
		return b.Signature != "" || b.ReasoningID != "" || b.EncryptedContent != ""
	}
	return false
}

// HasReasoningState reports whether any block of m does.
func (m *Message) HasReasoningState() bool {
	for i := range m.Content {
		if m.Content[i].HasReasoningState() {
			return true
		}
	}
	return false
}

// StripReasoningState returns content without reasoning state: redacted
// thinking blocks are dropped, thinking blocks keep their text (display
// only from then on; none is left when it is empty), everything else is
// unchanged. content itself is not modified.
func StripReasoningState(content []Block) []Block {
	out, _ := stripBlocks(content, func(*Block) bool { return true })
	return out
}

// stripBlocks is content with the reasoning state of the blocks strip
// accepts removed, and whether there was any (when not, content itself).
func stripBlocks(content []Block, strip func(*Block) bool) ([]Block, bool) {
	n := 0
	for i := range content {
		if content[i].HasReasoningState() && strip(&content[i]) {
			n++
		}
	}
	if n == 0 {
		return content, false
	}
	out := make([]Block, 0, len(content))
	for i := range content {
		b := content[i]
		if !b.HasReasoningState() || !strip(&b) {
			out = append(out, b)
			continue
		}
		if b.Type == BlockRedactedThinking {
			continue
		}
		b.Signature, b.ReasoningID, b.EncryptedContent, b.Summary = "", "", "", nil
		if b.Text != "" {
			out = append(out, b)
		}
	}
	return out, true
}

// StripReasoning returns msgs without any reasoning state (see
// StripReasoningState): what to send after a stale-reasoning rejection that
// Origin cannot explain. Messages without such state are shared with msgs;
// msgs itself is not modified.
func StripReasoning(msgs []Message) []Message {
	return stripMessages(msgs, func(*Block) bool { return true })
}

// StripForeignReasoning returns msgs without the reasoning state of the
// blocks whose Origin does not match target (Origin.Matches): what to send
// to target after a switch of provider, model or account. Blocks of
// unknown origin keep their state. Messages without such state are shared
// with msgs; msgs itself is not modified.
func StripForeignReasoning(msgs []Message, target Origin) []Message {
	return stripMessages(msgs, func(b *Block) bool { return !b.Origin.Matches(target) })
}

// StripReasoningFor returns msgs without the reasoning state that would be
// sent to target: the blocks whose Origin matches it (Origin.Matches; those
// of unknown origin included). It is what to drop after target refused the
// state it was sent although the origins matched (its account changed, say):
// other origins' state, which target was not sent, stays for a later call
// to them. Messages without such state are shared with msgs; msgs itself
// is not modified.
func StripReasoningFor(msgs []Message, target Origin) []Message {
	return stripMessages(msgs, func(b *Block) bool { return b.Origin.Matches(target) })
}

func stripMessages(msgs []Message, strip func(*Block) bool) []Message {
	var out []Message
	for i := range msgs {
		c, changed := stripBlocks(msgs[i].Content, strip)
		if !changed {
			continue
		}
		if out == nil {
			out = make([]Message, len(msgs))
			copy(out, msgs)
		}
		out[i].Content = c
	}
	if out == nil {
		return msgs
	}
	return out
}

// OpenToolTurnLacksThinking reports whether the last assistant message of
// an open tool loop (the latest assistant message with a tool call, with
// only tool results after it) does not start with replayable thinking (a
// signed thinking block or a redacted one). Anthropic refuses such a
// request while thinking is on ("a final `assistant` message must start
// with a thinking block"): a session that switched to Anthropic in the
// middle of a tool loop turns thinking off for the calls until the loop
// ends, or strips nothing and lets the retry classify the rejection.
func OpenToolTurnLacksThinking(msgs []Message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		switch m.Role {
		case RoleTool:
			continue
		case RoleUser:
			if hasOnly(m, BlockToolResult) {
				continue
			}
			return false
		case RoleAssistant:
			if len(m.Content) == 0 && (m.StopReason == StopError || m.StopReason == StopAborted) {
				continue // not sent
			}
			if !hasType(m, BlockToolCall) {
				return false
			}
			for _, b := range m.Content {
				switch {
				case b.Type == BlockRedactedThinking && (b.Data != "" || b.Text != ""):
					return false
				case b.Type == BlockThinking && b.Signature != "":
					return false
				case b.Type == BlockText && b.Text == "":
					continue // dropped on the wire
				case b.Type == BlockThinking:
					continue // unsigned: not sent
				}
				return true
			}
			return true
		}
	}
	return false
}

func hasType(m *Message, typ string) bool {
	for _, b := range m.Content {
		if b.Type == typ {
			return true
		}
	}
	return false
}

func hasOnly(m *Message, typ string) bool {
	for _, b := range m.Content {
		if b.Type != typ {
			return false
		}
	}
	return len(m.Content) > 0
}
