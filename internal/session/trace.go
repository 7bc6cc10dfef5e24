package session

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentd/agentd/internal/provider"
)

// Tracing (Options.Tracer). Each prompt is a span named SpanPrompt, the
// child of the trace context its Prompt call came with (gRPC metadata or
// HTTP traceparent, which the server puts in the call's context), with
// one child span per model call attempt, named and attributed after the
// OpenTelemetry GenAI conventions ("chat <model>", gen_ai.*). What the retry
// flow decides — retries (class, delay, its source), their end, credential
// switches, fallbacks and model changes, context overflows — are events of
// the prompt span. Spans carry ids, models, counts and retry classes,
// never a secret; prompt and answer text only with
// Options.CaptureContent. Without a Tracer nothing of this runs.

// SpanPrompt is the name of a prompt's span.
const SpanPrompt = "agentd.prompt"

// Attribute keys of agentd's own (the gen_ai.* ones are the conventions').
const (
	attrSessionID    = attribute.Key("gen_ai.conversation.id")
	attrPromptID     = attribute.Key("agentd.prompt.id")
	attrTenant       = attribute.Key("agentd.tenant")
	attrModel        = attribute.Key("agentd.model")
	attrOutcome      = attribute.Key("agentd.prompt.outcome")
	attrAttempt      = attribute.Key("agentd.call.index")
	attrCredential   = attribute.Key("agentd.credential.id")
	attrStatus       = attribute.Key("agentd.error.status")
	attrCost         = attribute.Key("agentd.cost_usd")
	attrReasoning    = attribute.Key("agentd.usage.reasoning_tokens")
	attrRetryTokens  = attribute.Key("agentd.retry_usage.total_tokens")
	attrInput        = attribute.Key("gen_ai.usage.input_tokens")
	attrOutput       = attribute.Key("gen_ai.usage.output_tokens")
	attrCacheRead    = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	attrCacheWrite   = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
	attrOperation    = attribute.Key("gen_ai.operation.name")
	attrSystem       = attribute.Key("gen_ai.system")
	attrProviderName = attribute.Key("gen_ai.provider.name")
	attrReqModel     = attribute.Key("gen_ai.request.model")
	attrRespModel    = attribute.Key("gen_ai.response.model")
	attrFinish       = attribute.Key("gen_ai.response.finish_reasons")
	attrMaxTokens    = attribute.Key("gen_ai.request.max_tokens")
	attrTemperature  = attribute.Key("gen_ai.request.temperature")
	attrTopP         = attribute.Key("gen_ai.request.top_p")
	attrErrorType    = attribute.Key("error.type")
)

// genAISystem is the gen_ai.system of a provider kind.
func genAISystem(kind string) string {
	switch kind {
	case provider.KindAnthropic:
		return "anthropic"
	case provider.KindOpenAIResponses, provider.KindOpenAIChat:
		return "openai"
	case provider.KindAzureOpenAI:
		return "az.ai.openai"
	case provider.KindGemini:
		return "gcp.gemini"
	case provider.KindVertex:
		return "gcp.vertex_ai"
	case provider.KindBedrock:
		return "aws.bedrock"
	default:
		return "agentd.simulated"
	}
}

// spanRef holds a running prompt's span, for the events emit adds to it.
type spanRef struct {
	span            trace.Span
	promptID, model string // the prompt's, and its model at the start
}

// promptSpan is the running prompt's span, nil when none is traced.
func (s *Session) promptSpan() trace.Span {
	if r := s.span.Load(); r != nil {
		return r.span
	}
	return nil
}

// startPromptSpan starts the prompt's span under parent (the trace
// context the Prompt call came with; invalid: a new trace). It returns ctx
// unchanged and a nil span when tracing is off.
func (s *Session) startPromptSpan(ctx context.Context, promptID string, parent trace.SpanContext) (context.Context, trace.Span) {
	tr := s.m.opts.Tracer
	if tr == nil {
		return ctx, nil
	}
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	s.mu.Lock()
	model := s.model
	s.mu.Unlock()
	ctx, span := tr.Start(ctx, SpanPrompt, trace.WithSpanKind(trace.SpanKindInternal))
	// Its attributes are set once, at its end (cheaper than twice).
	ref := &spanRef{span: span, promptID: promptID, model: model}
	s.span.Store(ref)
	// The ref, not the span: a span's dynamic type need not be comparable
	// (the SDK's non-recording one is not), and CompareAndDelete compares.
	s.m.traced.Store(s.id, ref)
	return ctx, span
}

// endPromptSpan ends the prompt's span with its outcome and usage.
func (s *Session) endPromptSpan(span trace.Span, outcome, errText string, spent, wasted Spend) {
	if span == nil {
		return
	}
	ref := s.span.Swap(nil)
	if ref != nil {
		s.m.traced.CompareAndDelete(s.id, ref)
	}
	if !span.IsRecording() {
		// Not sampled (OTEL_TRACES_SAMPLER): nothing to describe.
		span.End()
		return
	}
	u := spent.Usage
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs, attrSessionID.String(s.id), attrTenant.String(s.tenant), attrOutcome.String(outcome),
		attrInput.Int64(u.PromptTokens()), attrOutput.Int64(u.OutputTokens))
	if ref != nil {
		attrs = append(attrs, attrPromptID.String(ref.promptID), attrModel.String(ref.model))
	}
	attrs = appendUsageDetail(attrs, u)
	if n := wasted.Usage.Total(); n > 0 {
		attrs = append(attrs, attrRetryTokens.Int64(n))
	}
	if c := spent.Cost(); c != nil {
		attrs = append(attrs, attrCost.Float64(*c))
	}
	span.SetAttributes(attrs...)
	if outcome != OutcomeCompleted {
		span.SetStatus(codes.Error, errText)
	}
	span.End()
}

// attempt is a model call attempt being traced: its span is recorded when
// the call has ended, in one piece (its start time and every attribute at
// once: cheaper than a span kept open and amended), as the child of the
// prompt's span.
type attempt struct {
	ctx     context.Context
	started time.Time
	call    int
	model   string
	params  provider.Params
}

// startAttempt notes the start of a model call attempt (nil when tracing
// is off or the prompt's span is not sampled).
func (s *Session) startAttempt(ctx context.Context, call int) *attempt {
	if s.m.opts.Tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		// Off, or the prompt's span is not sampled: nor is its child.
		return nil
	}
	s.mu.Lock()
	a := &attempt{ctx: ctx, started: time.Now(), call: call, model: s.model, params: s.runParams}
	s.mu.Unlock()
	return a
}

// endAttempt records the attempt's span, "chat <model>", with what the
// call reported.
func (s *Session) endAttempt(a *attempt, t *turn) {
	if a == nil {
		return
	}
	msg := &t.Message
	p := s.m.providerOf(a.model)
	s.mu.Lock()
	credID := s.credential.ID
	s.mu.Unlock()
	name := strings.TrimPrefix(a.model, p.Name+"/")
	system := genAISystem(p.Kind)
	u := t.Usage
	attrs := make([]attribute.KeyValue, 0, 20)
	attrs = append(attrs, attrOperation.String("chat"), attrSystem.String(system), attrProviderName.String(system),
		attrReqModel.String(name), attrAttempt.Int(a.call),
		attrRespModel.String(strings.TrimPrefix(msg.Model, p.Name+"/")),
		attrFinish.StringSlice([]string{msg.StopReason}),
		attrInput.Int64(u.PromptTokens()), attrOutput.Int64(u.OutputTokens))
	if a.params.MaxTokens > 0 {
		attrs = append(attrs, attrMaxTokens.Int(a.params.MaxTokens))
	}
	if a.params.Temperature != nil {
		attrs = append(attrs, attrTemperature.Float64(*a.params.Temperature))
	}
	if a.params.TopP != nil {
		attrs = append(attrs, attrTopP.Float64(*a.params.TopP))
	}
	attrs = appendUsageDetail(attrs, u)
	if credID != "" {
		attrs = append(attrs, attrCredential.String(credID))
	}
	if t.cost != nil {
		attrs = append(attrs, attrCost.Float64(*t.cost))
	}
	failed := msg.StopReason == provider.StopError || msg.StopReason == provider.StopAborted
	if failed {
		et := string(t.verdict.Class)
		if et == "" {
			et = msg.StopReason
		}
		attrs = append(attrs, attrErrorType.String(et))
		if t.Failure != nil && t.Failure.Status != 0 {
			attrs = append(attrs, attrStatus.Int(t.Failure.Status))
		}
	}
	_, span := s.m.opts.Tracer.Start(a.ctx, "chat "+name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(a.started), trace.WithAttributes(attrs...))
	if failed {
		span.SetStatus(codes.Error, msg.ErrorMessage)
	}
	if s.m.opts.CaptureContent {
		s.mu.Lock()
		var prompt string
		for i := len(s.context) - 1; i >= 0; i-- {
			if s.context[i].Role == provider.RoleUser {
				prompt = s.context[i].Text()
				break
			}
		}
		s.mu.Unlock()
		span.AddEvent("gen_ai.content", trace.WithAttributes(
			attribute.String("gen_ai.prompt", prompt), attribute.String("gen_ai.completion", msg.Text())))
	}
	span.End()
}

// appendUsageDetail adds the cache and reasoning counts that are not zero.
func appendUsageDetail(attrs []attribute.KeyValue, u provider.Usage) []attribute.KeyValue {
	if u.CacheReadTokens != 0 {
		attrs = append(attrs, attrCacheRead.Int64(u.CacheReadTokens))
	}
	if u.CacheWriteTokens != 0 {
		attrs = append(attrs, attrCacheWrite.Int64(u.CacheWriteTokens))
	}
	if u.ReasoningTokens != 0 {
		attrs = append(attrs, attrReasoning.Int64(u.ReasoningTokens))
	}
	return attrs
}

// traceEvent adds what the retry flow decided to the prompt's span.
func (s *Session) traceEvent(e *Event) {
	span := s.promptSpan()
	if span == nil || !span.IsRecording() {
		return
	}
	var attrs []attribute.KeyValue
	switch e.Type {
	case EventAutoRetryStart:
		attrs = []attribute.KeyValue{attribute.Int("agentd.retry.attempt", e.Attempt), attribute.Int("agentd.retry.max_attempts", e.MaxAttempts),
			attribute.String("agentd.retry.class", e.ErrorClass), attribute.Int64("agentd.retry.delay_ms", e.Delay.Milliseconds()),
			attribute.String("agentd.retry.delay_source", e.DelaySource)}
	case EventAutoRetryEnd:
		attrs = []attribute.KeyValue{attribute.Bool("agentd.retry.success", e.Success), attribute.Int("agentd.retry.attempt", e.Attempt)}
		if e.FinalError != "" {
			attrs = append(attrs, attribute.String("agentd.retry.final_error", e.FinalError))
		}
	case EventCredentialSwitched:
		attrs = []attribute.KeyValue{attribute.String("agentd.provider", e.Provider), attribute.String("agentd.credential.from", e.From),
			attribute.String("agentd.credential.to", e.To), attribute.Bool("agentd.cache_lost", e.CacheLost)}
	case EventRetryFallbackApplied:
		attrs = []attribute.KeyValue{attribute.String("agentd.model.from", e.From), attribute.String("agentd.model.to", e.To),
			attribute.String("agentd.role", e.Role)}
	case EventModelChange:
		attrs = []attribute.KeyValue{attribute.String("agentd.model.from", e.From), attribute.String("agentd.model.to", e.To),
			attribute.String("agentd.model_change.reason", e.Reason), attribute.Bool("agentd.cache_lost", e.CacheLost)}
	case EventContextOverflow:
	default:
		return
	}
	span.AddEvent(e.Type, trace.WithAttributes(attrs...))
}

// traceIDHandler adds trace_id (and span_id) to the log lines about a
// session whose prompt is traced: the lines that name it with a "session"
// attribute.
type traceIDHandler struct {
	next slog.Handler
	m    *Manager
	// session is the session a logger's With named, if any.
	session string
}

func (h traceIDHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h traceIDHandler) Handle(ctx context.Context, r slog.Record) error {
	id := h.session
	if id == "" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "session" {
				id = a.Value.String()
				return false
			}
			return true
		})
	}
	if id != "" {
		// A map of its own, not the manager's lock: a line may be logged
		// while that is held.
		if v, ok := h.m.traced.Load(id); ok {
			if sc := v.(*spanRef).span.SpanContext(); sc.IsValid() {
				r = r.Clone()
				r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
			}
		}
	}
	return h.next.Handle(ctx, r)
}

func (h traceIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := traceIDHandler{next: h.next.WithAttrs(attrs), m: h.m, session: h.session}
	for _, a := range attrs {
		if a.Key == "session" {
			out.session = a.Value.String()
		}
	}
	return out
}

func (h traceIDHandler) WithGroup(name string) slog.Handler {
	return traceIDHandler{next: h.next.WithGroup(name), m: h.m, session: h.session}
}
