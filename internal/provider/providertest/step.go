package providertest

import (
	"net/http"
	"regexp"
	"time"
)

// StepKind is what the server does with one request.
type StepKind string

// Step kinds.
const (
	// StepOK streams the whole answer, terminal event included.
	StepOK StepKind = "ok"
	// StepHTTPError answers with Status, Body and Headers instead of a
	// stream. It writes any body as is: with Status 200 and ContentType
	// "text/event-stream" it plays a hand-written stream.
	StepHTTPError StepKind = "http-error"
	// StepErrorEvent starts the stream (status 200), streams After body
	// frames, then sends the kind's mid-stream error event (Anthropic
	// "event: error", Chat "data: {"error": …}", Responses "error" event in
	// the shape ErrorShape) and ends the body.
	StepErrorEvent StepKind = "error-event"
	// StepCut starts the stream, streams After body frames (none of the
	// preamble either with SkipPreamble), then ends the body cleanly without
	// the terminal event.
	StepCut StepKind = "cut"
	// StepReset resets the TCP connection (hijack, SO_LINGER 0, close): before
	// any response byte with BeforeHeaders, else after After body frames.
	StepReset StepKind = "reset"
	// StepHang stops answering until the client goes away (or the handler is
	// closed): before any response byte with BeforeHeaders, else after After
	// body frames.
	StepHang StepKind = "hang"
)

// Responses API error shapes, for StepErrorEvent on openai-responses.
const (
	// ShapeNested is the shape captured on the wire:
	// {"type":"error","sequence_number":N,"error":{"type":…,"code":…,"message":…,"param":…}}.
	ShapeNested = "nested"
	// ShapeFlat is the documented ResponseErrorEvent:
	// {"type":"error","sequence_number":N,"code":…,"message":…,"param":…}.
	ShapeFlat = "flat"
	// ShapeFailed sends no error event, only response.failed with
	// response.error {code, message}.
	ShapeFailed = "failed"
)

// AllFrames as Step.After streams every body frame: a cut then lacks only
// the terminal frames.
const AllFrames = 1 << 30

// Step is the server's answer to one request. The zero Step streams the
// default answer.
type Step struct {
	Kind StepKind

	// Answer is what the stream carries (StepOK, and what the faulting
	// kinds stream before their fault). Nil: Options.Answer, else
	// DefaultAnswer.
	Answer *Answer

	// StepHTTPError: the status, the raw body (empty: the kind's canonical
	// body for Status, see [Body]) and the content type (empty:
	// application/json).
	Status      int
	Body        string
	ContentType string

	// Headers are added to the response (any kind): retry-after,
	// anthropic-ratelimit-*, x-ratelimit-*, …
	Headers http.Header

	// StepErrorEvent: the error's type, code and message. Empty type and
	// message: overloaded_error "Overloaded" (Anthropic), server_error "The
	// server had an error while processing your request. Sorry about that!"
	// (OpenAI).
	ErrorType, ErrorCode, ErrorMessage string
	// ErrorParam is the OpenAI error's param (null when empty).
	ErrorParam string
	// ErrorShape is the Responses error shape (ShapeNested when empty).
	ErrorShape string
	// ThenFailed, for Responses ShapeNested/ShapeFlat: a response.failed
	// event follows the error event, as on the wire.
	ThenFailed bool

	// After is how many body frames (everything between the lifecycle
	// preamble and the terminal frames) are sent before a fault.
	After int
	// SkipPreamble, for StepCut/StepErrorEvent: the fault comes right after
	// the response headers (Anthropic "EOF before message_start").
	SkipPreamble bool
	// BeforeHeaders, for StepReset/StepHang: the fault comes before any
	// response byte.
	BeforeHeaders bool

	// Hold, when set, pauses the stream after HoldAfter body frames until
	// Hold is closed (or the client goes away): a test can then observe
	// the deltas of a stream that has not ended.
	Hold      <-chan struct{}
	HoldAfter int

	// Delay is waited before the response (added to Options.Delay).
	// ChunkDelay, when > 0, replaces Options.ChunkDelay between frames.
	Delay      time.Duration
	ChunkDelay time.Duration
}

// Answer is the content of a streamed answer, in the order it streams:
// thinking, text, then tool calls. Thinking carries the kind's reasoning
// state: an Anthropic thinking block its signature (AnthropicSignature), a
// Responses reasoning item its encrypted_content (OpenAIEncryptedContent)
// when the request includes "reasoning.encrypted_content".
type Answer struct {
	// ID is the message / response / completion id; empty: generated.
	ID string
	// Model is echoed in the stream; empty: the request's model.
	Model string
	// Redacted are redacted_thinking blocks' data (Anthropic), streamed
	// before the thinking.
	Redacted []string
	Thinking []string // thinking (reasoning summary) deltas
	// EmptyThinking, without Thinking, streams a thinking block without
	// text: Anthropic a signature-only block, Responses a reasoning item
	// with an empty summary.
	EmptyThinking bool
	Text          []string // text deltas
	Tools         []ToolCall
	// Stop, empty for the natural stop (tool calls: tool use; else end of
	// turn), or one of "length", "refusal", "content_filter", mapped onto
	// each kind's wire form (Anthropic max_tokens / refusal with
	// stop_details; Chat finish_reason length / a refusal delta /
	// content_filter; Responses response.incomplete max_output_tokens / a
	// refusal part / response.incomplete content_filter).
	Stop string
	// Refusal is the refusal explanation and RefusalCategory its policy
	// category (Anthropic stop_details; Stop "refusal").
	Refusal, RefusalCategory string
	// Usage reported; zero: 25 input tokens, output = number of deltas.
	// InputTokens is the input neither read from nor written to the cache,
	// as agentd counts it: the OpenAI kinds report InputTokens +
	// CacheReadTokens + CacheWriteTokens as their prompt tokens, with
	// CacheReadTokens as its cached part (OpenAI has no cache-write count);
	// Anthropic reports the three apart, in message_start (the cache fields
	// when not zero). ReasoningTokens is the reasoning part of the output
	// (the OpenAI kinds' reasoning_tokens; Anthropic has no such count).
	InputTokens, OutputTokens                          int
	CacheReadTokens, CacheWriteTokens, ReasoningTokens int
}

// ToolCall is one streamed tool call.
type ToolCall struct {
	ID   string   // empty: generated
	Name string   // the tool's name
	Args []string // the JSON arguments, in the pieces they stream in
}

// Stop values of an Answer.
const (
	StopLength        = "length"
	StopRefusal       = "refusal"
	StopContentFilter = "content_filter"
)

// DefaultAnswer is the answer of the documented Anthropic example stream:
// "Hello" and "!".
func DefaultAnswer() *Answer {
	return &Answer{Text: []string{"Hello", "!"}}
}

var wordRe = regexp.MustCompile(`\S+\s*|^\s+`)

// Words splits s into streaming pieces: each word with the whitespace after
// it (leading whitespace is a piece of its own), so they concatenate to s.
func Words(s string) []string {
	return wordRe.FindAllString(s, -1)
}

// HTTPError is a StepHTTPError with the kind's canonical body for status
// and the given extra headers (alternating names and values).
func HTTPError(status int, headers ...string) Step {
	return Step{Kind: StepHTTPError, Status: status, Headers: hdr(headers...)}
}

// RawError is a StepHTTPError with the given body and headers.
func RawError(status int, body string, headers ...string) Step {
	return Step{Kind: StepHTTPError, Status: status, Body: body, Headers: hdr(headers...)}
}

func hdr(kv ...string) http.Header {
	if len(kv) == 0 {
		return nil
	}
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}
