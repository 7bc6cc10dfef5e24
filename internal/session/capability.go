package session

import (
	"context"
	"slices"
	"strings"

	"github.com/agentd/agentd/internal/provider"
)

// ChangeOverflow is the model_change reason of an overflow fallback: the
// context did not fit the model, the session moved to the next model of its
// chain with a larger context window (retry.overflow_fallback).
const ChangeOverflow = "overflow"

// bytesPerToken is the context size estimate's ratio: about four bytes of
// English text or JSON per token for the models agentd serves.
const bytesPerToken = 4

// estimateTokens is a rough size of a call's input, in tokens: its system
// prompt, messages (text, thinking, tool inputs and results) and tool
// definitions, at bytesPerToken.
func estimateTokens(system string, msgs []provider.Message, tools []provider.Tool) int {
	n := len(system)
	for _, m := range msgs {
		for _, b := range m.Content {
			n += len(b.Text) + len(b.ToolName) + len(b.ToolInput) + len(b.Data) + len(b.EncryptedContent)
			for _, s := range b.Summary {
				n += len(s)
			}
		}
	}
	for _, t := range tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	return n / bytesPerToken
}

// needs is what a model must offer to serve the session's next call.
type needs struct {
	tokens   int  // the context's size estimate
	tools    bool // the session has tools
	thinking bool // the prompt asks for thinking
}

// needsLocked is what the session's next call needs.
func (s *Session) needsLocked() needs {
	return needs{
		tokens:   estimateTokens(s.system, s.context, s.tools),
		tools:    len(s.tools) > 0,
		thinking: s.runParams.Thinking != nil,
	}
}

// cannotServe says why model (provider/model) cannot serve a call that
// needs n, from its catalog entry; "" when it can, or when the catalog does
// not know (nothing is checked against what is unknown).
func (s *Session) cannotServe(model string, n needs) string {
	p := s.m.providerOf(model)
	info := p.ModelInfo(strings.TrimPrefix(model, p.Name+"/"))
	switch {
	case info.ContextWindow > 0 && info.ContextWindow < n.tokens:
		return "context window smaller than the context"
	case n.tools && info.SupportsTools != nil && !*info.SupportsTools:
		return "no tools"
	case n.thinking && info.SupportsThinking != nil && !*info.SupportsThinking:
		return "no thinking"
	}
	return ""
}

// skipIncapable reports whether a fallback candidate cannot serve the
// session, and logs why.
func (s *Session) skipIncapable(candidate string, n needs) bool {
	why := s.cannotServe(candidate, n)
	if why != "" {
		s.m.log.Info("fallback candidate skipped", "session", s.id, "candidate", candidate, "why", why, "context_tokens_estimate", n.tokens)
	}
	return why != ""
}

// contextWindow is model's catalog context window (0: unknown).
func (s *Session) contextWindow(model string) int {
	p := s.m.providerOf(model)
	return p.ModelInfo(strings.TrimPrefix(model, p.Name+"/")).ContextWindow
}

// overflowFallback is retry.overflow_fallback: the context overflowed the
// session's model, so it moves to the next model of its chain whose
// catalog context window is larger (and that is not cooling down and can
// serve the session), with model_change reason overflow. The move is
// remembered (the fallback is pinned: never reverted, since the context
// only grows), and the failed message leaves the runtime context, as for a
// retry. It reports whether it moved; when no such model exists the
// overflow ends the prompt as before.
func (s *Session) overflowFallback(ctx context.Context, promptID string, msg *provider.Message) bool {
	s.mu.Lock()
	settings, current, role, primary := s.settings, s.model, s.role, s.primary
	if s.fallback != nil {
		role, primary = s.fallback.role, s.fallback.original
	}
	n := s.needsLocked()
	s.mu.Unlock()
	if !settings.OverflowFallback {
		return false
	}
	window := s.contextWindow(current)
	if window <= 0 {
		return false // nothing to compare with
	}
	chain := chainFor(settings, role, primary)
	pos := max(slices.Index(chain, current), 0)
	for _, candidate := range chain[pos+1:] {
		if w := s.contextWindow(candidate); w <= window || candidate == current {
			continue
		}
		// The context did not fit window tokens: it needs more than that.
		if s.skipIncapable(candidate, needs{tokens: max(n.tokens, window+1), tools: n.tools, thinking: n.thinking}) || s.suppressed(ctx, candidate) {
			continue
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.model != current {
			return false // changed meanwhile
		}
		s.dropFailedTurnLocked(msg)
		if s.fallback == nil {
			s.fallback = &activeFallback{role: role, original: current}
		}
		s.fallback.pinned = true
		s.m.log.Info("context overflow: the session moves to a model with a larger context window", "session", s.id,
			"model", current, "context_window", window, "to", candidate, "to_context_window", s.contextWindow(candidate))
		s.switchModelLocked(ctx, promptID, current, candidate, ChangeOverflow)
		return true
	}
	return false
}

// dropFailedTurnLocked takes the failed assistant message msg off the
// runtime context when it is the last one (the persisted history keeps
// it), as step 11 of the retry flow does; the store records it, for the
// replicas that run the session next.
func (s *Session) dropFailedTurnLocked(msg *provider.Message) {
	n := len(s.context)
	if n == 0 || s.context[n-1].Role != provider.RoleAssistant || s.context[n-1].StopReason != msg.StopReason {
		return
	}
	s.context = s.context[:n-1]
	if len(s.ctxIndex) != n {
		return
	}
	idx := s.ctxIndex[n-1]
	s.ctxIndex = s.ctxIndex[:n-1]
	ctx, cancel := context.WithTimeout(context.Background(), s.m.leaseTTL())
	defer cancel()
	if err := s.m.store.Strip(ctx, s.id, idx); err != nil {
		s.m.log.Warn("stripped message not recorded", "session", s.id, "err", err)
	}
}
