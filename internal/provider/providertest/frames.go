package providertest

import (
	"fmt"
	"strings"

	"github.com/agentd/agentd/internal/provider"
)

// created is the fixed creation time of every answer (deterministic output).
const created = 1751642570

// plan is a streamed answer as SSE frames: the lifecycle preamble, the body
// and the terminal frames. errFrames renders the kind's mid-stream error for
// a step, given the number of frames already sent (Responses events carry
// their sequence number).
type plan struct {
	preamble, body, terminal []string
	errFrames                func(s *Step, sent int) []string
}

// streamInfo is what a plan needs to know about its request.
type streamInfo struct {
	kind  string
	model string
	index int // the request's index, for generated ids
	// Responses: echoed fields.
	previousResponseID string
	store              bool
	// Chat: stream_options.include_usage.
	includeUsage bool
	// account is the account (organisation) of the request's key: reasoning
	// state is bound to it.
	account string
	// encrypted: the Responses request includes reasoning.encrypted_content.
	encrypted bool
}

func (si streamInfo) id(prefix string) string { return fmt.Sprintf("%s_test%04d", prefix, si.index) }

func eventFrame(event, data string) string { return "event: " + event + "\ndata: " + data + "\n\n" }
func dataFrame(data string) string         { return "data: " + data + "\n\n" }

// usage returns the answer's token counts, defaulted.
func usage(a *Answer) (in, out int) {
	in, out = a.InputTokens, a.OutputTokens
	if in == 0 {
		in = 25
	}
	if out == 0 {
		out = len(a.Thinking) + len(a.Text)
		for _, t := range a.Tools {
			out += len(t.Args)
		}
		out = max(out, 1)
	}
	return in, out
}

// anthropicStartUsage is message_start's usage: the documented example's
// two counts, and the cache counts when the answer has any (as the API
// sends them: the input counted apart from them).
func anthropicStartUsage(a *Answer, in int) obj {
	u := obj{{"input_tokens", in}}
	if a.CacheReadTokens != 0 || a.CacheWriteTokens != 0 {
		u = append(u, kv{"cache_creation_input_tokens", a.CacheWriteTokens}, kv{"cache_read_input_tokens", a.CacheReadTokens})
	}
	return append(u, kv{"output_tokens", 1})
}

// openAIPrompt is the OpenAI kinds' prompt tokens: the cached ones included.
func openAIPrompt(a *Answer, in int) int { return in + a.CacheReadTokens + a.CacheWriteTokens }

func toolID(si streamInfo, prefix string, i int, t ToolCall) string {
	if t.ID != "" {
		return t.ID
	}
	return fmt.Sprintf("%s_test%04d_%d", prefix, si.index, i)
}

func newPlan(si streamInfo, a *Answer) plan {
	if a.Model != "" {
		si.model = a.Model
	}
	switch si.kind {
	case provider.KindAnthropic:
		return anthropicPlan(si, a)
	case provider.KindOpenAIResponses:
		return responsesPlan(si, a)
	case provider.KindGemini:
		return geminiPlan(si, a)
	default:
		return chatPlan(si, a)
	}
}

// ---- Anthropic Messages (spaced JSON, as in the documented stream) ----

func anthropicPlan(si streamInfo, a *Answer) plan {
	sp := func(v any) string { return enc(true, v) }
	id := a.ID
	if id == "" {
		id = si.id("msg")
	}
	in, out := usage(a)
	var p plan
	p.preamble = []string{eventFrame("message_start", sp(obj{
		{"type", "message_start"},
		{"message", obj{
			{"id", id}, {"type", "message"}, {"role", "assistant"}, {"content", arr{}},
			{"model", si.model}, {"stop_reason", nil}, {"stop_sequence", nil},
			{"usage", anthropicStartUsage(a, in)},
		}},
	}))}
	ping := eventFrame("ping", sp(obj{{"type", "ping"}}))
	index := 0
	block := func(start obj, deltas []obj) {
		p.body = append(p.body, eventFrame("content_block_start", sp(obj{
			{"type", "content_block_start"}, {"index", index}, {"content_block", start},
		})))
		if index == 0 {
			p.body = append(p.body, ping)
		}
		for _, d := range deltas {
			p.body = append(p.body, eventFrame("content_block_delta", sp(obj{
				{"type", "content_block_delta"}, {"index", index}, {"delta", d},
			})))
		}
		p.body = append(p.body, eventFrame("content_block_stop", sp(obj{
			{"type", "content_block_stop"}, {"index", index},
		})))
		index++
	}
	for _, data := range a.Redacted {
		block(obj{{"type", "redacted_thinking"}, {"data", data}}, nil)
	}
	if len(a.Thinking) > 0 || a.EmptyThinking {
		var ds []obj
		for _, t := range a.Thinking {
			ds = append(ds, obj{{"type", "thinking_delta"}, {"thinking", t}})
		}
		// The signature arrives last, just before content_block_stop.
		sig := AnthropicSignature(si.account, si.model, strings.Join(a.Thinking, ""))
		ds = append(ds, obj{{"type", "signature_delta"}, {"signature", sig}})
		block(obj{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, ds)
	}
	if len(a.Text) > 0 {
		var ds []obj
		for _, t := range a.Text {
			ds = append(ds, obj{{"type", "text_delta"}, {"text", t}})
		}
		block(obj{{"type", "text"}, {"text", ""}}, ds)
	}
	for i, t := range a.Tools {
		ds := []obj{{{"type", "input_json_delta"}, {"partial_json", ""}}}
		for _, piece := range t.Args {
			ds = append(ds, obj{{"type", "input_json_delta"}, {"partial_json", piece}})
		}
		block(obj{{"type", "tool_use"}, {"id", toolID(si, "toolu", i, t)}, {"name", t.Name}, {"input", obj{}}}, ds)
	}
	if index == 0 {
		p.body = append(p.body, ping)
	}

	stop := "end_turn"
	switch {
	case a.Stop == StopLength:
		stop = "max_tokens"
	case a.Stop == StopRefusal || a.Stop == StopContentFilter:
		stop = "refusal"
	case len(a.Tools) > 0:
		stop = "tool_use"
	}
	// The documented message_delta writes "stop_sequence":null without the
	// space; kept byte for byte.
	delta := `{"stop_reason": ` + jsonString(stop) + `, "stop_sequence":null`
	if stop == "refusal" {
		delta += `, "stop_details": ` + sp(obj{
			{"type", "refusal"}, {"category", orNull(a.RefusalCategory)}, {"explanation", orNull(a.Refusal)},
		})
	}
	delta += "}"
	p.body = append(p.body, eventFrame("message_delta",
		`{"type": "message_delta", "delta": `+delta+`, "usage": `+sp(obj{{"output_tokens", out}})+`}`))
	p.terminal = []string{eventFrame("message_stop", sp(obj{{"type", "message_stop"}}))}

	p.errFrames = func(s *Step, _ int) []string {
		typ, msg := s.ErrorType, s.ErrorMessage
		if typ == "" && msg == "" {
			return []string{eventFrame("error", AnthropicOverloadedStream)}
		}
		e := obj{{"type", typ}, {"message", msg}}
		if s.ErrorCode != "" {
			e = append(e, kv{"details", obj{{"error_code", s.ErrorCode}}})
		}
		return []string{eventFrame("error", sp(obj{{"type", "error"}, {"error", e}}))}
	}
	return p
}

// ---- OpenAI Responses (compact JSON, event: + data: frames) ----

const (
	openAIServerErrorType    = "server_error"
	openAIServerErrorMessage = "The server had an error while processing your request. Sorry about that!"
)

func responsesPlan(si streamInfo, a *Answer) plan {
	c := func(v any) string { return enc(false, v) }
	id := a.ID
	if id == "" {
		id = si.id("resp")
	}
	in, out := usage(a)
	seq := 0
	var frames []string
	ev := func(typ string, fields ...kv) {
		o := append(obj{{"type", typ}, {"sequence_number", seq}}, fields...)
		frames = append(frames, eventFrame(typ, c(o)))
		seq++
	}
	response := func(status string, output arr, extra ...kv) obj {
		var u any
		if status == "completed" || status == "incomplete" {
			u = obj{
				{"input_tokens", openAIPrompt(a, in)}, {"input_tokens_details", obj{{"cached_tokens", a.CacheReadTokens}}},
				{"output_tokens", out}, {"output_tokens_details", obj{{"reasoning_tokens", a.ReasoningTokens}}},
				{"total_tokens", openAIPrompt(a, in) + out},
			}
		}
		r := obj{
			{"id", id}, {"object", "response"}, {"created_at", created}, {"status", status},
			{"background", false}, {"error", nil}, {"incomplete_details", nil}, {"instructions", nil},
			{"max_output_tokens", nil}, {"model", si.model}, {"output", output},
			{"parallel_tool_calls", true}, {"previous_response_id", orNull(si.previousResponseID)},
			{"reasoning", obj{{"effort", nil}, {"summary", nil}}}, {"store", si.store},
			{"temperature", 1.0}, {"text", obj{{"format", obj{{"type", "text"}}}}},
			{"tool_choice", "auto"}, {"tools", arr{}}, {"top_p", 1.0}, {"truncation", "disabled"},
			{"usage", u}, {"user", nil}, {"metadata", obj{}},
		}
		for _, e := range extra {
			for i := range r {
				if r[i].k == e.k {
					r[i].v = e.v
				}
			}
		}
		return r
	}

	var p plan
	ev("response.created", kv{"response", response("in_progress", arr{})})
	ev("response.in_progress", kv{"response", response("in_progress", arr{})})
	p.preamble, frames = frames, nil

	var output arr
	oi := 0
	if len(a.Thinking) > 0 || a.EmptyThinking {
		itemID := fmt.Sprintf("rs_test%04d", si.index)
		full := strings.Join(a.Thinking, "")
		ev("response.output_item.added", kv{"output_index", oi}, kv{"item", obj{{"id", itemID}, {"type", "reasoning"}, {"summary", arr{}}}})
		summary := arr{}
		if len(a.Thinking) > 0 {
			ev("response.reasoning_summary_part.added", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"summary_index", 0},
				kv{"part", obj{{"type", "summary_text"}, {"text", ""}}})
			for _, t := range a.Thinking {
				ev("response.reasoning_summary_text.delta", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"summary_index", 0}, kv{"delta", t})
			}
			ev("response.reasoning_summary_text.done", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"summary_index", 0}, kv{"text", full})
			ev("response.reasoning_summary_part.done", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"summary_index", 0},
				kv{"part", obj{{"type", "summary_text"}, {"text", full}}})
			summary = arr{obj{{"type", "summary_text"}, {"text", full}}}
		}
		item := obj{{"id", itemID}, {"type", "reasoning"}, {"summary", summary}}
		if si.encrypted {
			item = append(item, kv{"encrypted_content", OpenAIEncryptedContent(si.account, itemID)})
		}
		ev("response.output_item.done", kv{"output_index", oi}, kv{"item", item})
		output = append(output, item)
		oi++
	}
	refusal := a.Stop == StopRefusal
	if len(a.Text) > 0 || refusal {
		itemID := fmt.Sprintf("msg_test%04d", si.index)
		ev("response.output_item.added", kv{"output_index", oi}, kv{"item", obj{
			{"id", itemID}, {"type", "message"}, {"status", "in_progress"}, {"content", arr{}}, {"role", "assistant"},
		}})
		var parts arr
		ci := 0
		if len(a.Text) > 0 {
			full := strings.Join(a.Text, "")
			ev("response.content_part.added", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"content_index", ci},
				kv{"part", obj{{"type", "output_text"}, {"annotations", arr{}}, {"logprobs", arr{}}, {"text", ""}}})
			for _, t := range a.Text {
				ev("response.output_text.delta", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"content_index", ci},
					kv{"delta", t}, kv{"logprobs", arr{}})
			}
			ev("response.output_text.done", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"content_index", ci},
				kv{"text", full}, kv{"logprobs", arr{}})
			part := obj{{"type", "output_text"}, {"annotations", arr{}}, {"logprobs", arr{}}, {"text", full}}
			ev("response.content_part.done", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"content_index", ci}, kv{"part", part})
			parts = append(parts, part)
			ci++
		}
		if refusal {
			ev("response.content_part.added", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"content_index", ci},
				kv{"part", obj{{"type", "refusal"}, {"refusal", ""}}})
			ev("response.refusal.delta", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"content_index", ci}, kv{"delta", a.Refusal})
			ev("response.refusal.done", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"content_index", ci}, kv{"refusal", a.Refusal})
			part := obj{{"type", "refusal"}, {"refusal", a.Refusal}}
			ev("response.content_part.done", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"content_index", ci}, kv{"part", part})
			parts = append(parts, part)
		}
		item := obj{{"id", itemID}, {"type", "message"}, {"status", "completed"}, {"content", parts}, {"role", "assistant"}}
		ev("response.output_item.done", kv{"output_index", oi}, kv{"item", item})
		output = append(output, item)
		oi++
	}
	for i, t := range a.Tools {
		itemID := fmt.Sprintf("fc_test%04d_%d", si.index, i)
		callID := toolID(si, "call", i, t)
		full := strings.Join(t.Args, "")
		ev("response.output_item.added", kv{"output_index", oi}, kv{"item", obj{
			{"id", itemID}, {"type", "function_call"}, {"status", "in_progress"}, {"arguments", ""},
			{"call_id", callID}, {"name", t.Name},
		}})
		for _, piece := range t.Args {
			ev("response.function_call_arguments.delta", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"delta", piece})
		}
		ev("response.function_call_arguments.done", kv{"item_id", itemID}, kv{"output_index", oi}, kv{"arguments", full})
		item := obj{
			{"id", itemID}, {"type", "function_call"}, {"status", "completed"}, {"arguments", full},
			{"call_id", callID}, {"name", t.Name},
		}
		ev("response.output_item.done", kv{"output_index", oi}, kv{"item", item})
		output = append(output, item)
		oi++
	}
	p.body, frames = frames, nil
	if output == nil {
		output = arr{}
	}
	switch a.Stop {
	case StopLength:
		ev("response.incomplete", kv{"response", response("incomplete", output,
			kv{"incomplete_details", obj{{"reason", "max_output_tokens"}}})})
	case StopContentFilter:
		ev("response.incomplete", kv{"response", response("incomplete", output,
			kv{"incomplete_details", obj{{"reason", "content_filter"}}})})
	default:
		ev("response.completed", kv{"response", response("completed", output)})
	}
	p.terminal = frames

	p.errFrames = func(s *Step, sent int) []string {
		typ, code, msg := s.ErrorType, s.ErrorCode, s.ErrorMessage
		if typ == "" && msg == "" {
			typ, code, msg = openAIServerErrorType, openAIServerErrorType, openAIServerErrorMessage
		}
		var out []string
		failed := func(n int) string {
			return eventFrame("response.failed", c(obj{
				{"type", "response.failed"}, {"sequence_number", n},
				{"response", response("failed", arr{}, kv{"error", obj{{"code", orNull(code)}, {"message", msg}}})},
			}))
		}
		switch s.ErrorShape {
		case ShapeFailed:
			return []string{failed(sent)}
		case ShapeFlat:
			out = append(out, eventFrame("error", c(obj{
				{"type", "error"}, {"sequence_number", sent}, {"code", orNull(code)}, {"message", msg}, {"param", orNull(s.ErrorParam)},
			})))
		default:
			e := obj{{"code", orNull(code)}, {"message", msg}, {"param", orNull(s.ErrorParam)}}
			if typ != "" {
				e = append(obj{{"type", typ}}, e...)
			}
			out = append(out, eventFrame("error", c(obj{{"type", "error"}, {"sequence_number", sent}, {"error", e}})))
		}
		if s.ThenFailed {
			out = append(out, failed(sent+1))
		}
		return out
	}
	return p
}

// ---- OpenAI Chat Completions (compact JSON, data: frames) ----

func chatPlan(si streamInfo, a *Answer) plan {
	c := func(v any) string { return enc(false, v) }
	id := a.ID
	if id == "" {
		id = si.id("chatcmpl")
	}
	in, out := usage(a)
	chunk := func(delta obj, finish any) string {
		o := obj{
			{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", si.model},
			{"system_fingerprint", "fp_44709d6fcb"},
			{"choices", arr{obj{{"index", 0}, {"delta", delta}, {"logprobs", nil}, {"finish_reason", finish}}}},
		}
		if si.includeUsage {
			o = append(o, kv{"usage", nil})
		}
		return dataFrame(c(o))
	}
	var p plan
	p.preamble = []string{chunk(obj{{"role", "assistant"}, {"content", ""}, {"refusal", nil}}, nil)}
	for _, t := range a.Thinking {
		// OpenAI-compatible servers (vLLM, DeepSeek) stream reasoning this way.
		p.body = append(p.body, chunk(obj{{"reasoning_content", t}}, nil))
	}
	for _, t := range a.Text {
		p.body = append(p.body, chunk(obj{{"content", t}}, nil))
	}
	if a.Stop == StopRefusal {
		p.body = append(p.body, chunk(obj{{"refusal", a.Refusal}}, nil))
	}
	for i, t := range a.Tools {
		p.body = append(p.body, chunk(obj{{"tool_calls", arr{obj{
			{"index", i}, {"id", toolID(si, "call", i, t)}, {"type", "function"},
			{"function", obj{{"name", t.Name}, {"arguments", ""}}},
		}}}}, nil))
		for _, piece := range t.Args {
			p.body = append(p.body, chunk(obj{{"tool_calls", arr{obj{
				{"index", i}, {"function", obj{{"arguments", piece}}},
			}}}}, nil))
		}
	}
	finish := "stop"
	switch {
	case a.Stop == StopLength:
		finish = "length"
	case a.Stop == StopContentFilter:
		finish = "content_filter"
	case a.Stop == StopRefusal:
	case len(a.Tools) > 0:
		finish = "tool_calls"
	}
	p.body = append(p.body, chunk(obj{}, finish))
	if si.includeUsage {
		p.body = append(p.body, dataFrame(c(obj{
			{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", si.model},
			{"system_fingerprint", "fp_44709d6fcb"}, {"choices", arr{}},
			{"usage", obj{
				{"prompt_tokens", openAIPrompt(a, in)}, {"completion_tokens", out}, {"total_tokens", openAIPrompt(a, in) + out},
				{"prompt_tokens_details", obj{{"cached_tokens", a.CacheReadTokens}, {"audio_tokens", 0}}},
				{"completion_tokens_details", obj{{"reasoning_tokens", a.ReasoningTokens}, {"audio_tokens", 0},
					{"accepted_prediction_tokens", 0}, {"rejected_prediction_tokens", 0}}},
			}},
		})))
	}
	p.terminal = []string{dataFrame("[DONE]")}

	p.errFrames = func(s *Step, _ int) []string {
		typ, code, msg := s.ErrorType, s.ErrorCode, s.ErrorMessage
		if typ == "" && msg == "" {
			typ, msg = openAIServerErrorType, openAIServerErrorMessage
		}
		return []string{dataFrame(c(obj{{"error", obj{
			{"message", msg}, {"type", orNull(typ)}, {"param", orNull(s.ErrorParam)}, {"code", orNull(code)},
		}}}))}
	}
	return p
}
