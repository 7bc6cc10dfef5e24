// Package convert maps between the session engine's types and the API's:
// sessions, events, history entries, credentials, retry settings, tools and
// model parameters, and the engine's errors onto gRPC status codes. The
// mappings from requests fail with INVALID_ARGUMENT naming the field
// (InvalidArg), whose messages never echo a huge input whole (Clip).
package convert

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// ToStatus maps the session engine's errors onto gRPC status codes, in one
// place. Messages are safe to show: they never carry secrets.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	var inv *session.InvalidError
	var dropped *session.DroppedError
	var resume *session.ResumeError
	switch {
	case errors.As(err, &inv):
		return status.Error(codes.InvalidArgument, inv.Error())
	case errors.As(err, &dropped):
		return status.Error(codes.OutOfRange, dropped.Error())
	case errors.As(err, &resume):
		// The replica lost the session's lease mid-prompt: the client
		// resumes from the seq named, on any replica.
		return status.Error(codes.Unavailable, resume.Error())
	case errors.Is(err, session.ErrNotFound), errors.Is(err, credstore.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, session.ErrBusy), errors.Is(err, session.ErrNotWaiting):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, credstore.ErrReadOnly):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, credstore.ErrForbidden):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, credstore.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, credstore.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, credstore.ErrExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, session.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, session.ErrLimit):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, credstore.ErrLimit):
		return status.Error(codes.ResourceExhausted, "limits.max_credentials_per_tenant: "+err.Error())
	case errors.Is(err, session.ErrClosed), errors.Is(err, session.ErrLogClosed):
		return status.Error(codes.Unavailable, err.Error())
	default:
		return status.FromContextError(err).Err()
	}
}

// InvalidArg is INVALID_ARGUMENT naming field; string args are clipped
// (a huge input is never echoed whole).
func InvalidArg(field, format string, args ...any) error {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = Clip(s)
		}
	}
	return status.Error(codes.InvalidArgument, field+": "+fmt.Sprintf(format, args...))
}

// SessionToProto maps a session's state onto the API's Session.
func SessionToProto(st session.State) *agentdv1.Session {
	out := &agentdv1.Session{
		Id: st.ID, Tenant: st.Tenant, Model: st.Model, PrimaryModel: st.PrimaryModel, Role: st.Role,
		SystemPrompt: st.SystemPrompt, Status: st.Status, IsRetrying: st.IsRetrying,
		RetryAttempt: int32(st.RetryAttempt), AutoRetryEnabled: st.Retry.Enabled,
		Retry: settingsToProto(st.Retry), CreateTime: timestamppb.New(st.Created),
		LastSeq: st.LastSeq, MessageCount: int32(st.MessageCount), Params: paramsToProto(st.Params),
		Usage: usageToProto(&st.Usage), CostUsd: st.CostUSD,
	}
	for _, c := range st.PendingToolCalls {
		out.PendingToolCalls = append(out.PendingToolCalls, &agentdv1.ToolCall{CallId: c.CallID, Name: c.Name, Input: jsonValue(c.Input)})
	}
	for _, t := range st.Tools {
		pt := &agentdv1.Tool{Name: t.Name, Description: t.Description}
		if len(t.InputSchema) > 0 {
			var s structpb.Struct
			if err := s.UnmarshalJSON(t.InputSchema); err == nil {
				pt.InputSchema = &s
			}
		}
		out.Tools = append(out.Tools, pt)
	}
	return out
}

func settingsToProto(s retry.Settings) *agentdv1.RetrySettings {
	out := &agentdv1.RetrySettings{
		Enabled:              &s.Enabled,
		MaxRetries:           ptr(int32(s.MaxRetries)),
		BaseDelayMs:          ptr(s.BaseDelay.Milliseconds()),
		MaxDelayMs:           ptr(s.MaxDelay.Milliseconds()),
		ModelFallback:        &s.ModelFallback,
		FallbackRevertPolicy: &s.FallbackRevertPolicy,
	}
	if len(s.FallbackChains) > 0 {
		out.FallbackChains = map[string]*agentdv1.ModelChain{}
		for role, chain := range s.FallbackChains {
			out.FallbackChains[role] = &agentdv1.ModelChain{Models: chain}
		}
	}
	return out
}

// OverridesFromProto maps a request's retry settings onto the session's
// overrides (nil: none).
func OverridesFromProto(r *agentdv1.RetrySettings) (session.RetryOverrides, error) {
	var o session.RetryOverrides
	if r == nil {
		return o, nil
	}
	o.Enabled = r.Enabled
	o.ModelFallback = r.ModelFallback
	o.FallbackRevertPolicy = r.FallbackRevertPolicy
	if r.MaxRetries != nil {
		n := int(*r.MaxRetries)
		if n < 0 {
			return o, InvalidArg("retry.max_retries", "must be >= 0, got %d", n)
		}
		o.MaxRetries = &n
	}
	if r.BaseDelayMs != nil {
		if *r.BaseDelayMs < 0 || *r.BaseDelayMs > int64(time.Hour/time.Millisecond) {
			return o, InvalidArg("retry.base_delay_ms", "must be between 0 and 3600000, got %d", *r.BaseDelayMs)
		}
		d := time.Duration(*r.BaseDelayMs) * time.Millisecond
		o.BaseDelay = &d
	}
	if r.MaxDelayMs != nil {
		if *r.MaxDelayMs > int64(30*24*time.Hour/time.Millisecond) {
			return o, InvalidArg("retry.max_delay_ms", "must be at most 30 days, got %d", *r.MaxDelayMs)
		}
		d := time.Duration(*r.MaxDelayMs) * time.Millisecond
		o.MaxDelay = &d
	}
	if len(r.FallbackChains) > 0 {
		o.FallbackChains = map[string][]string{}
		for role, chain := range r.FallbackChains {
			o.FallbackChains[role] = chain.GetModels()
		}
	}
	return o, nil
}

// ToolsFromProto maps a request's tools onto the provider's.
func ToolsFromProto(tools []*agentdv1.Tool) ([]provider.Tool, error) {
	out := make([]provider.Tool, 0, len(tools))
	for i, t := range tools {
		pt := provider.Tool{Name: t.GetName(), Description: t.GetDescription()}
		if t.GetInputSchema() != nil {
			b, err := t.GetInputSchema().MarshalJSON()
			if err != nil {
				return nil, InvalidArg(fmt.Sprintf("tools[%d].input_schema", i), "%v", err)
			}
			pt.InputSchema = b
		}
		out = append(out, pt)
	}
	return out, nil
}

// ParamsFromProto maps a request's model parameters; nil stays nil (none
// given). The session engine checks them, but for a 0 asked for (its 0 is
// "the provider's default").
func ParamsFromProto(p *agentdv1.ModelParams) (*provider.Params, error) {
	if p == nil {
		return nil, nil
	}
	if p.MaxTokens != nil && p.GetMaxTokens() == 0 {
		return nil, InvalidArg("params.max_tokens", "must be > 0 (leave it out for the provider's default)")
	}
	out := &provider.Params{MaxTokens: int(p.GetMaxTokens()), Temperature: p.Temperature, TopP: p.TopP,
		StopSequences: p.GetStopSequences()}
	if th := p.GetThinking(); th != nil {
		if _, ok := th.GetLevel().(*agentdv1.ThinkingParams_BudgetTokens); ok && th.GetBudgetTokens() == 0 {
			return nil, InvalidArg("params.thinking.budget_tokens", "must be > 0")
		}
		out.Thinking = &provider.Thinking{BudgetTokens: int(th.GetBudgetTokens()), Effort: th.GetEffort()}
	}
	return out, nil
}

// paramsToProto maps a session's model parameters (every field set that
// is set, none else).
func paramsToProto(p provider.Params) *agentdv1.ModelParams {
	out := &agentdv1.ModelParams{Temperature: p.Temperature, TopP: p.TopP, StopSequences: p.StopSequences}
	if p.MaxTokens != 0 {
		out.MaxTokens = ptr(int32(p.MaxTokens))
	}
	if th := p.Thinking; th != nil {
		out.Thinking = &agentdv1.ThinkingParams{}
		switch {
		case th.BudgetTokens != 0:
			out.Thinking.Level = &agentdv1.ThinkingParams_BudgetTokens{BudgetTokens: int32(th.BudgetTokens)}
		case th.Effort != "":
			out.Thinking.Level = &agentdv1.ThinkingParams_Effort{Effort: th.Effort}
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// usageToProto maps usage onto the API's (nil: none).
func usageToProto(u *provider.Usage) *agentdv1.Usage {
	if u == nil {
		return nil
	}
	return &agentdv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens, ReasoningTokens: u.ReasoningTokens}
}

func stopDetails(t string) *agentdv1.StopDetails {
	if t == "" {
		return nil
	}
	return &agentdv1.StopDetails{Type: t}
}

func jsonValue(raw json.RawMessage) *structpb.Value {
	if len(raw) == 0 {
		return nil
	}
	var v structpb.Value
	if err := v.UnmarshalJSON(raw); err != nil {
		return structpb.NewStringValue(string(raw))
	}
	return &v
}

// Events maps the session events of one stream onto the API's, reusing
// the API event and its time for every event, and the message_update
// payload, from one call to the next: a stream's steady state, a delta
// after a delta, allocates nothing, and any other event only its payload.
// A result is valid until the next call; the stream encodes it before
// (gRPC's SendMsg encodes synchronously, and the server registers no
// stats handler, which could keep a message). The zero value is ready.
type Events struct {
	ev   agentdv1.Event
	ts   timestamppb.Timestamp
	upd  agentdv1.MessageUpdate
	wrap agentdv1.Event_MessageUpdate
	tcd  agentdv1.ToolCallDelta
}

// Proto is EventToProto(e) in b's buffers: the event and its time, and a
// message_update's payload.
func (b *Events) Proto(e *session.Event) *agentdv1.Event {
	b.ts.Reset()
	b.ts.Seconds, b.ts.Nanos = e.Time.Unix(), int32(e.Time.Nanosecond())
	if e.Type != session.EventMessageUpdate {
		b.ev.Reset()
		eventInto(&b.ev, &b.ts, e)
		return &b.ev
	}
	b.upd.Reset()
	b.upd.TextDelta, b.upd.ThinkingDelta = e.TextDelta, e.ThinkingDelta
	if d := e.ToolCallDelta; d != nil {
		b.tcd.Reset()
		b.tcd.CallId, b.tcd.Name, b.tcd.InputDelta = d.CallID, d.Name, d.InputDelta
		b.upd.ToolCallDelta = &b.tcd
	}
	b.wrap.MessageUpdate = &b.upd
	b.ev.Reset()
	b.ev.SessionId, b.ev.Seq, b.ev.Time, b.ev.Type, b.ev.PromptId = e.SessionID, e.Seq, &b.ts, e.Type, e.PromptID
	b.ev.Payload = &b.wrap
	return &b.ev
}

// EventToProto maps a session event onto the API's Event.
func EventToProto(e *session.Event) *agentdv1.Event {
	out := new(agentdv1.Event)
	eventInto(out, timestamppb.New(e.Time), e)
	return out
}

// eventInto fills out, a zero Event, with e, at ts (e's time).
func eventInto(out *agentdv1.Event, ts *timestamppb.Timestamp, e *session.Event) {
	out.SessionId, out.Seq, out.Time, out.Type, out.PromptId = e.SessionID, e.Seq, ts, e.Type, e.PromptID
	switch e.Type {
	case session.EventAgentStart:
		out.Payload = &agentdv1.Event_AgentStart{AgentStart: &agentdv1.AgentStart{PromptId: e.PromptID}}
	case session.EventMessageStart:
		out.Payload = &agentdv1.Event_MessageStart{MessageStart: &agentdv1.MessageStart{Role: e.Role, Model: e.Model, CredentialId: e.Credential}}
	case session.EventMessageUpdate:
		u := &agentdv1.MessageUpdate{TextDelta: e.TextDelta, ThinkingDelta: e.ThinkingDelta}
		if d := e.ToolCallDelta; d != nil {
			u.ToolCallDelta = &agentdv1.ToolCallDelta{CallId: d.CallID, Name: d.Name, InputDelta: d.InputDelta}
		}
		out.Payload = &agentdv1.Event_MessageUpdate{MessageUpdate: u}
	case session.EventMessageEnd:
		out.Payload = &agentdv1.Event_MessageEnd{MessageEnd: &agentdv1.MessageEnd{
			StopReason: e.StopReason, ErrorMessage: e.ErrorMessage, StopDetails: stopDetails(e.StopDetails),
			Model: e.Model, Text: e.Text, ErrorClass: e.ErrorClass, Usage: usageToProto(e.Usage), CostUsd: e.CostUSD,
		}}
	case session.EventToolCall:
		tc := &agentdv1.ToolCall{}
		if e.ToolCall != nil {
			tc = &agentdv1.ToolCall{CallId: e.ToolCall.CallID, Name: e.ToolCall.Name, Input: jsonValue(e.ToolCall.Input)}
		}
		out.Payload = &agentdv1.Event_ToolCall{ToolCall: tc}
	case session.EventAgentEnd:
		out.Payload = &agentdv1.Event_AgentEnd{AgentEnd: &agentdv1.AgentEnd{}}
	case session.EventAutoRetryStart:
		out.Payload = &agentdv1.Event_AutoRetryStart{AutoRetryStart: &agentdv1.AutoRetryStart{
			Attempt: int32(e.Attempt), MaxAttempts: int32(e.MaxAttempts), DelayMs: e.Delay.Milliseconds(),
			ErrorMessage: e.ErrorMessage, ErrorClass: e.ErrorClass, DelaySource: e.DelaySource,
		}}
	case session.EventAutoRetryEnd:
		out.Payload = &agentdv1.Event_AutoRetryEnd{AutoRetryEnd: &agentdv1.AutoRetryEnd{
			Success: e.Success, Attempt: int32(e.Attempt), FinalError: e.FinalError,
		}}
	case session.EventRetryFallbackApplied:
		out.Payload = &agentdv1.Event_RetryFallbackApplied{RetryFallbackApplied: &agentdv1.RetryFallbackApplied{From: e.From, To: e.To, Role: e.Role}}
	case session.EventRetryFallbackSucceeded:
		out.Payload = &agentdv1.Event_RetryFallbackSucceeded{RetryFallbackSucceeded: &agentdv1.RetryFallbackSucceeded{Model: e.Model, Role: e.Role}}
	case session.EventModelChange:
		out.Payload = &agentdv1.Event_ModelChange{ModelChange: &agentdv1.ModelChange{From: e.From, To: e.To, Reason: e.Reason, CacheLost: e.CacheLost}}
	case session.EventCredentialSwitched:
		out.Payload = &agentdv1.Event_CredentialSwitched{CredentialSwitched: &agentdv1.CredentialSwitched{Provider: e.Provider, From: e.From, To: e.To, CacheLost: e.CacheLost}}
	case session.EventContextOverflow:
		out.Payload = &agentdv1.Event_ContextOverflow{ContextOverflow: &agentdv1.ContextOverflow{ErrorMessage: e.ErrorMessage}}
	case session.EventPromptEnd:
		out.Payload = &agentdv1.Event_PromptEnd{PromptEnd: &agentdv1.PromptEnd{Outcome: e.Outcome, Error: e.Error,
			Usage: usageToProto(e.Usage), RetryUsage: usageToProto(e.RetryUsage), CostUsd: e.CostUSD, RetryCostUsd: e.RetryCostUSD}}
	}
}

// EntryToProto maps a history entry onto the API's Message.
func EntryToProto(e session.Entry) *agentdv1.Message {
	m := e.Message
	out := &agentdv1.Message{
		Index: e.Index, Role: m.Role, Model: m.Model, StopReason: m.StopReason, ErrorMessage: m.ErrorMessage,
		StopDetails: stopDetails(m.StopDetails), PromptId: e.PromptID, Time: timestamppb.New(e.Time),
		Usage: usageToProto(e.Usage), CostUsd: e.CostUSD,
	}
	if e.ModelChange != nil {
		out.ModelChange = &agentdv1.ModelChange{From: e.ModelChange.From, To: e.ModelChange.To, Reason: e.ModelChange.Reason}
	}
	for _, b := range m.Content {
		text := b.Text
		if b.Type == provider.BlockRedactedThinking {
			// Opaque data (histories written before Block.Data held it in
			// Text): reasoning state, never shown.
			text = ""
		}
		// Signatures, redacted data and encrypted reasoning stay here: a
		// thinking block shows its thinking text only.
		out.Content = append(out.Content, &agentdv1.ContentBlock{
			Type: b.Type, Text: text, ToolCallId: b.ToolCallID, ToolName: b.ToolName,
			ToolInput: jsonValue(b.ToolInput), IsError: b.IsError,
		})
	}
	return out
}

// CredentialToProto maps a credential's info onto the API's Credential.
func CredentialToProto(i credstore.Info) *agentdv1.Credential {
	out := &agentdv1.Credential{Id: i.ID, Provider: i.Provider, Status: i.Status, BlockReason: i.BlockReason,
		BankedResets: int32(i.BankedResets), Source: i.Source, Owner: i.Owner, Account: i.Account}
	if out.Account == "" {
		out.Account = i.ID // a credential without an account is an account of its own
	}
	if !i.BlockedUntil.IsZero() {
		out.BlockedUntil = timestamppb.New(i.BlockedUntil)
	}
	return out
}

// maxEcho bounds what of a caller's input an error message repeats.
const maxEcho = 128

// Clip is s cut to maxEcho bytes (on a rune boundary) with "…" and the
// full length when it was longer: an error never echoes a huge input whole.
func Clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	cut := maxEcho
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}
