package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// Options configure the simulated provider's pace.
type Options struct {
	FirstTokenDelay time.Duration // before the first delta, or before an error answer
	TokenDelay      time.Duration // between deltas
	// NoPromptCache turns the simulated prompt cache off: every input
	// token is then reported as input (see the package doc, Usage).
	NoPromptCache bool
}

// Provider is the simulated provider. It is safe for concurrent use.
type Provider struct {
	opts  Options
	seq   atomic.Uint64 // request ids
	cache promptCache
}

var _ provider.Provider = (*Provider)(nil)

// New returns a simulated provider with the given pace. Negative delays
// count as zero.
func New(opts Options) *Provider {
	opts.FirstTokenDelay = max(opts.FirstTokenDelay, 0)
	opts.TokenDelay = max(opts.TokenDelay, 0)
	return &Provider{opts: opts}
}

// Error types and codes the answers carry.
const (
	typeInvalidRequest    = "invalid_request_error"
	typeAuthentication    = "authentication_error"
	typePermission        = "permission_error"
	typeNotFound          = "not_found_error"
	typeConflict          = "conflict_error"
	typeRequestTooLarge   = "request_too_large"
	typeRateLimit         = "rate_limit_error"
	typeAPI               = "api_error"
	typeTimeout           = "timeout_error"
	typeOverloaded        = "overloaded_error"
	typeInsufficientQuota = "insufficient_quota"

	codeOAuthNotAllowed          = "oauth_not_allowed_for_organization"
	codeInsufficientQuota        = "insufficient_quota"
	codePreviousResponseNotFound = "previous_response_not_found"
)

// Messages, as the providers word them (docs/retry-policy.md §6).
const (
	msgInvalidRequest  = `messages: roles must alternate between "user" and "assistant"`
	msgAuthentication  = "invalid x-api-key"
	msgPermission      = "OAuth authentication is currently not allowed for this organization."
	msgRequestTooLarge = "Request exceeds the maximum size"
	msgRateLimit       = "Number of request tokens has exceeded your per-minute rate limit " +
		"(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. " +
		"Please reduce the prompt length or the maximum tokens requested, or try again later. " +
		"You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."
	msgAPI        = "Internal server error"
	msgTimeout    = "The request timed out while processing."
	msgOverloaded = "Overloaded"
	msgEnvoy503   = "upstream connect error or disconnect/reset before headers. reset reason: connection failure"
	msgOverflow   = "prompt is too long: 205351 tokens > 200000 maximum"
	msgQuota      = "You exceeded your current quota, please check your plan and billing details. " +
		"For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."
	msgStaleFormat = "Previous response with id '%s' not found."
	// Anthropic's refusal of a thinking block signed for another model or
	// account.
	msgStaleReasoning = "messages.1.content.0: Invalid `signature` in `thinking` block"

	msgMidstream = "stream error: stream ID 1; INTERNAL_ERROR; received from peer"
	msgCut       = "stream ended before message_stop: unexpected EOF"
	msgReset     = "read tcp 127.0.0.1:52814->127.0.0.1:443: read: connection reset by peer"
	msgTimedOut  = "Request timed out."
	msgRefusal   = "Refusal (cyber): Classifier declined this turn."

	emptyPrompt = "(empty prompt)"
)

// errorBody is an HTTP error answer: its error type, message and code.
type errorBody struct {
	typ, message, code string
	openAI             bool // worded by OpenAI: x-request-id, x-ratelimit-reset-requests
}

// statusBody is the answer to each HTTP status step ("" type: an edge
// answer with no JSON error body).
func statusBody(status int, model string) errorBody {
	switch status {
	case 400:
		return errorBody{typ: typeInvalidRequest, message: msgInvalidRequest}
	case 401:
		return errorBody{typ: typeAuthentication, message: msgAuthentication}
	case 403:
		return errorBody{typ: typePermission, message: msgPermission, code: codeOAuthNotAllowed}
	case 404:
		return errorBody{typ: typeNotFound, message: "model: " + model}
	case 409:
		return errorBody{typ: typeConflict}
	case 413:
		return errorBody{typ: typeRequestTooLarge, message: msgRequestTooLarge}
	case 429:
		return errorBody{typ: typeRateLimit, message: msgRateLimit}
	case 500:
		return errorBody{typ: typeAPI, message: msgAPI}
	case 503:
		return errorBody{message: msgEnvoy503}
	case 504:
		return errorBody{typ: typeTimeout, message: msgTimeout}
	case 529:
		return errorBody{typ: typeOverloaded, message: msgOverloaded}
	default: // 408, 502
		return errorBody{}
	}
}

// Stream plays one model call: the step of the prompt's fault script for
// req.Call, or the normal answer. It returns when the call ends or ctx is
// done, calls onDelta from the calling goroutine only, starts no goroutine,
// and reports every failure in the Result.
func (p *Provider) Stream(ctx context.Context, req *provider.Request, onDelta func(provider.Delta)) provider.Result {
	if onDelta == nil {
		onDelta = func(provider.Delta) {}
	}
	c := &call{p: p, ctx: ctx, req: req, onDelta: onDelta}

	script, text, err := parse(latestUserText(req.Messages))
	if err != nil {
		if !c.wait(p.opts.FirstTokenDelay) {
			return c.aborted()
		}
		return c.httpError(http.StatusBadRequest, errorBody{typ: typeInvalidRequest, message: err.Error()}, Step{})
	}
	step := script.Step(req.Call)
	if !c.wait(step.Delay) {
		return c.aborted()
	}

	switch step.Kind {
	case StepHang:
		if step.After > 0 {
			c.in = inputTokens(req)
			words := answerWords(script, text)
			if !c.stream(words[:min(step.After, len(words))]) {
				return c.aborted()
			}
		}
		<-ctx.Done()
		return c.aborted()
	case StepOK, StepMidstream, StepCut:
		if !c.think(text) {
			return c.aborted()
		}
		if turn := toolTurn(req.Messages); turn < len(script.Tools) {
			return c.toolCalls(script.Tools[turn], text, step)
		}
		words := answerWords(script, text)
		if len(script.Tools) > 0 {
			words = wordRe.FindAllString("echo: "+text+" (tools: "+toolResults(req.Messages)+")", -1)
		}
		n := len(words)
		switch {
		case step.Kind == StepOK:
		case step.After > 0:
			n = min(step.After, n)
		case step.Kind == StepMidstream:
			n = max(1, n/2)
		}
		c.in = inputTokens(req)
		if !c.stream(words[:n]) {
			return c.aborted()
		}
		if step.Kind == StepOK {
			return c.result(provider.StopEnd, "", "", nil)
		}
		// The failure arrives where the next event would have.
		if !c.wait(p.opts.TokenDelay) {
			return c.aborted()
		}
		f := &provider.Failure{Status: http.StatusOK, Headers: c.headers(false)}
		msg := msgMidstream
		if step.Kind == StepCut {
			msg = msgCut
		}
		return c.result(provider.StopError, msg, provider.DetailInterruptedAfterContent, f)
	}

	// Every other step answers at once, after the time to the first byte.
	if !c.wait(p.opts.FirstTokenDelay) {
		return c.aborted()
	}
	switch step.Kind {
	case StepHTTP:
		return c.httpError(step.Status, statusBody(step.Status, req.Model), step)
	case StepOverflow:
		return c.httpError(http.StatusBadRequest, errorBody{typ: typeInvalidRequest, message: msgOverflow}, step)
	case StepUsage:
		return c.httpError(http.StatusTooManyRequests, errorBody{
			typ: typeInsufficientQuota, message: msgQuota, code: codeInsufficientQuota, openAI: true,
		}, step)
	case StepStale:
		r := c.httpError(http.StatusBadRequest, errorBody{
			typ: typeInvalidRequest, message: fmt.Sprintf(msgStaleFormat, staleID(req)),
			code: codePreviousResponseNotFound, openAI: true,
		}, step)
		r.ResetState = true
		return r
	case StepStaleReasoning:
		return c.httpError(http.StatusBadRequest, errorBody{typ: typeInvalidRequest, message: msgStaleReasoning}, step)
	case StepOverloadedStream:
		c.in = inputTokens(req)
		f := &provider.Failure{Status: http.StatusOK, Headers: c.headers(false), Type: typeOverloaded}
		return c.result(provider.StopError, provider.HTTPErrorMessage(http.StatusOK, typeOverloaded, msgOverloaded), "", f)
	case StepReset:
		return c.result(provider.StopError, msgReset, "", &provider.Failure{})
	case StepTimeout:
		return c.result(provider.StopError, msgTimedOut, "", &provider.Failure{})
	case StepRefusal:
		c.in = inputTokens(req)
		return c.result(provider.StopError, msgRefusal, provider.DetailRefusal, nil)
	case StepAbort:
		return c.result(provider.StopAborted, provider.AbortedMessage, "", nil)
	}
	// Unreachable: parse accepts no other kind.
	return c.httpError(http.StatusBadRequest, errorBody{typ: typeInvalidRequest, message: "unknown step " + string(step.Kind)}, Step{})
}

// call is the state of one Stream.
type call struct {
	p       *Provider
	ctx     context.Context
	req     *provider.Request
	onDelta func(provider.Delta)

	text     strings.Builder // streamed so far
	thinking strings.Builder // thinking streamed so far
	in       int64           // input tokens billed
	out      int64           // words streamed, thinking included
	split    *provider.Usage // c.in as the prompt cache split it, once
}

// wait waits d, or until the context is done; it reports whether the
// context is still live.
func (c *call) wait(d time.Duration) bool {
	if d <= 0 {
		return c.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return c.ctx.Err() == nil
	case <-c.ctx.Done():
		return false
	}
}

// stream emits words one delta each, paced by the options. It reports
// whether the context stayed live.
func (c *call) stream(words []string) bool { return c.emit(words, false) }

// emit emits words as text or thinking deltas, one each, paced by the
// options. It reports whether the context stayed live.
func (c *call) emit(words []string, thinking bool) bool {
	for _, w := range words {
		d := c.p.opts.TokenDelay
		if c.out == 0 {
			d = c.p.opts.FirstTokenDelay
		}
		if !c.wait(d) {
			return false
		}
		c.out++
		if thinking {
			c.thinking.WriteString(w)
			c.onDelta(provider.Delta{Thinking: w})
			continue
		}
		c.text.WriteString(w)
		c.onDelta(provider.Delta{Text: w})
	}
	return true
}

// think streams the thinking of a call that asks for it
// (Request.Params.Thinking): a sentence per effort level about the prompt's
// text. It reports whether the context stayed live.
func (c *call) think(text string) bool {
	th := c.req.Params.Thinking
	if th == nil {
		return true
	}
	if text == "" {
		text = emptyPrompt
	}
	s := "The prompt says " + strconv.Quote(text) + "."
	switch th.Level() {
	case provider.EffortMedium:
		s += " An echo of it answers."
	case provider.EffortHigh:
		s += " An echo of it answers. Nothing else is asked for, so the echo is the whole answer."
	}
	return c.emit(wordRe.FindAllString(s, -1), true)
}

// Signature is the signature the simulated provider gives a thinking block
// with text thinking, made by model: stable, and never accepted by another
// provider.
func Signature(model, thinking string) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s", model, thinking)
	return fmt.Sprintf("sim-sig-%016x", h.Sum64())
}

// result ends the call with what was streamed so far.
func (c *call) result(stop, errMsg, details string, f *provider.Failure) provider.Result {
	m := provider.Message{
		Role:         provider.RoleAssistant,
		Content:      []provider.Block{},
		Model:        c.req.Model,
		StopReason:   stop,
		ErrorMessage: errMsg,
		StopDetails:  details,
	}
	if c.thinking.Len() > 0 {
		b := provider.Block{Type: provider.BlockThinking, Text: c.thinking.String()}
		// Like the real providers, a failed or aborted call leaves no
		// reasoning state to replay: only a completed block is signed.
		if stop != provider.StopError && stop != provider.StopAborted {
			b.Signature = Signature(c.req.Model, b.Text)
		}
		m.Content = append(m.Content, b)
	}
	if c.text.Len() > 0 {
		m.Content = append(m.Content, provider.Block{Type: provider.BlockText, Text: c.text.String()})
	}
	return provider.Result{
		Message: m,
		Failure: f,
		Usage:   c.usage(),
	}
}

// usage is the call's usage: the input it was billed, split by the prompt
// cache, and the words it streamed.
// The cache is consulted once per call.
func (c *call) usage() provider.Usage {
	if c.split == nil {
		u := provider.Usage{InputTokens: c.in}
		if c.in > 0 && !c.p.opts.NoPromptCache {
			u = c.p.cache.usage(c.req, c.in)
		}
		c.split = &u
	}
	u := *c.split
	u.OutputTokens = c.out
	return u
}

// aborted ends a call whose context is done, or a reasonless abort.
func (c *call) aborted() provider.Result {
	return c.result(provider.StopAborted, provider.AbortedMessage, "", nil)
}

// httpError ends the call with an HTTP error answer before any stream, with
// the response headers step asks for.
func (c *call) httpError(status int, b errorBody, step Step) provider.Result {
	h := c.headers(b.openAI)
	if step.RetryAfter != "" {
		h.Set("retry-after", step.RetryAfter)
	}
	if step.RetryAfterMS != "" {
		h.Set("retry-after-ms", step.RetryAfterMS)
	}
	if step.Reset != "" {
		if b.openAI {
			h.Set("x-ratelimit-reset-requests", resetDuration(step.Reset).String())
		} else {
			h.Set("anthropic-ratelimit-requests-reset", resetTime(step.Reset).Format(time.RFC3339))
		}
	}
	f := &provider.Failure{Status: status, Headers: h, Type: b.typ, Code: b.code}
	return c.result(provider.StopError, provider.HTTPErrorMessage(status, b.typ, b.message), "", f)
}

// headers returns the headers of a response: its request id.
func (c *call) headers(openAI bool) http.Header {
	h := http.Header{}
	id := fmt.Sprintf("req_sim%017d", c.p.seq.Add(1))
	if openAI {
		h.Set("x-request-id", id)
	} else {
		h.Set("request-id", id)
	}
	return h
}

// resetTime is a reset option as a time: an RFC 3339 time as written, a
// duration from now.
func resetTime(v string) time.Time {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t
	}
	d, _ := time.ParseDuration(v)
	return time.Now().Add(d).UTC().Truncate(time.Second)
}

// resetDuration is a reset option as a duration from now (never negative).
func resetDuration(v string) time.Duration {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return max(time.Until(t).Round(time.Millisecond), 0)
	}
	d, _ := time.ParseDuration(v)
	return d
}

// staleID is a response id for a stale replay, stable for a request.
func staleID(req *provider.Request) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d", req.Model, req.Call)
	return fmt.Sprintf("resp_%016x", h.Sum64())
}

// toolTurn is the number of tool turns the run has completed: the tool
// result messages after the latest user message.
func toolTurn(msgs []provider.Message) int {
	n := 0
	for i := len(msgs) - 1; i >= 0 && msgs[i].Role != provider.RoleUser; i-- {
		if msgs[i].Role == provider.RoleTool {
			n++
		}
	}
	return n
}

// toolResults summarises the tool results after the latest user message:
// "name=content; …".
func toolResults(msgs []provider.Message) string {
	names := map[string]string{}
	var parts []string
	start := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == provider.RoleUser {
			start = i + 1
			break
		}
	}
	for _, m := range msgs[start:] {
		for _, b := range m.Content {
			switch b.Type {
			case provider.BlockToolCall:
				names[b.ToolCallID] = b.ToolName
			case provider.BlockToolResult:
				r := b.Text
				if b.IsError {
					r = "error: " + r
				}
				parts = append(parts, names[b.ToolCallID]+"="+r)
			}
		}
	}
	return strings.Join(parts, "; ")
}

// toolCalls answers a tool turn: one tool call per name, each with the input
// {"text": <the prompt's text>}, streamed as deltas (id and name, then the
// input in two pieces). A midstream or cut step fails the turn after its
// tool calls completed: a failure that must not be retried.
func (c *call) toolCalls(names []string, text string, step Step) provider.Result {
	c.in = inputTokens(c.req)
	input, _ := json.Marshal(map[string]string{"text": text})
	var blocks []provider.Block
	for i, name := range names {
		id := fmt.Sprintf("call_%d_%d", len(c.req.Messages), i)
		d := c.p.opts.TokenDelay
		if i == 0 {
			d = c.p.opts.FirstTokenDelay
		}
		if !c.wait(d) {
			return c.aborted()
		}
		c.onDelta(provider.Delta{ToolCallID: id, ToolName: name})
		half := len(input) / 2
		for _, part := range []string{string(input[:half]), string(input[half:])} {
			if !c.wait(c.p.opts.TokenDelay) {
				return c.aborted()
			}
			c.onDelta(provider.Delta{ToolCallID: id, ToolArgsPart: part})
		}
		c.out++
		blocks = append(blocks, provider.Block{Type: provider.BlockToolCall, ToolCallID: id, ToolName: name, ToolInput: input})
	}
	r := c.result(provider.StopToolUse, "", "", nil)
	if step.Kind == StepMidstream || step.Kind == StepCut {
		r = c.result(provider.StopError, msgMidstream, provider.DetailInterruptedAfterContent, &provider.Failure{Status: http.StatusOK, Headers: c.headers(false)})
	}
	r.Message.Content = append(r.Message.Content, blocks...)
	return r
}

// latestUserText returns the text of the latest user message.
func latestUserText(msgs []provider.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == provider.RoleUser {
			return msgs[i].Text()
		}
	}
	return ""
}

// inputTokens counts the words of the request.
func inputTokens(req *provider.Request) int64 {
	n := countWords(req.System)
	for _, m := range req.Messages {
		for _, b := range m.Content {
			n += countWords(b.Text)
		}
	}
	return n
}

// wordRe is one streamed word: the word and the whitespace after it.
var wordRe = regexp.MustCompile(`\S+\s*`)

// answerWords is the answer to a prompt whose text (directives removed) is
// text, split into its streamed words.
func answerWords(s Script, text string) []string {
	if s.Tokens > 0 {
		return lorem(s.Tokens)
	}
	if text == "" {
		text = emptyPrompt
	}
	return wordRe.FindAllString("echo: "+text, -1)
}

var loremWords = strings.Fields(`lorem ipsum dolor sit amet consectetur adipiscing elit sed do
	eiusmod tempor incididunt ut labore et dolore magna aliqua ut enim ad minim veniam quis
	nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat duis aute irure
	dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur
	excepteur sint occaecat cupidatat non proident sunt in culpa qui officia deserunt mollit
	anim id est laborum`)

// lorem returns n words of lorem ipsum, each but the last with a trailing space.
func lorem(n int) []string {
	words := make([]string, n)
	for i := range words {
		words[i] = loremWords[i%len(loremWords)] + " "
	}
	words[n-1] = strings.TrimSuffix(words[n-1], " ")
	return words
}
