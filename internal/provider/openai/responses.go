package openai

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/wire"
)

// responsesRequest is the body of POST /responses.
type responsesRequest struct {
	Model              string          `json:"model"`
	Instructions       string          `json:"instructions,omitempty"`
	Input              []inputItem     `json:"input"`
	Tools              []responsesTool `json:"tools,omitempty"`
	MaxOutputTokens    int             `json:"max_output_tokens,omitempty"`
	Temperature        *float64        `json:"temperature,omitempty"`
	TopP               *float64        `json:"top_p,omitempty"`
	Reasoning          *reasoningParam `json:"reasoning,omitempty"`
	Include            []string        `json:"include,omitempty"`
	PreviousResponseID string          `json:"previous_response_id,omitempty"`
	Store              bool            `json:"store"`
	Stream             bool            `json:"stream"`
	PromptCacheKey     string          `json:"prompt_cache_key,omitempty"`
}

// reasoningParam is the request's reasoning: {"effort", "summary"}.
type reasoningParam struct {
	Effort  string `json:"effort"`
	Summary string `json:"summary"`
}

// includeEncryptedReasoning asks for reasoning items' encrypted_content.
const includeEncryptedReasoning = "reasoning.encrypted_content"

// inputItem is one item of a Responses input: a message
// ({"type":"message","role","content"}), a reasoning item ({"type":
// "reasoning","id","summary","encrypted_content"}), a function_call or a
// function_call_output.
type inputItem struct {
	Type string `json:"type"`
	// Reasoning items.
	ID               string         `json:"id,omitempty"`
	Summary          *[]summaryPart `json:"summary,omitempty"` // always sent with a reasoning item
	EncryptedContent string         `json:"encrypted_content,omitempty"`

	Role      string  `json:"role,omitempty"`
	Content   string  `json:"content,omitempty"`
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	Arguments string  `json:"arguments,omitempty"`
	Output    *string `json:"output,omitempty"`
}

// summaryPart is one part of a reasoning item's summary.
type summaryPart struct {
	Type string `json:"type"` // "summary_text"
	Text string `json:"text"`
}

type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}

// items maps one message onto Responses input items: a user message's tool
// results (function_call_output) and then its text; a tool message's tool
// results; an assistant message's blocks in their order, consecutive text
// as one message item, tool calls as function_call items, and reasoning
// blocks that carry an id and encrypted content as reasoning items (id,
// summary parts, encrypted_content, byte for byte as they came). Other
// thinking is not sent back: without encrypted content a reasoning item
// would name state that store: false did not keep. A reasoning item that
// nothing follows in its message is dropped (the API refuses a reasoning
// item without the item it preceded). Skipped messages give no item.
func items(m provider.Message) []inputItem {
	if skipped(m) {
		return nil
	}
	if m.Role == provider.RoleAssistant {
		return assistantItems(m)
	}
	var out []inputItem
	var text strings.Builder
	for _, b := range m.Content {
		switch b.Type {
		case provider.BlockText:
			text.WriteString(b.Text)
		case provider.BlockToolResult:
			output := b.Text
			out = append(out, inputItem{Type: "function_call_output", CallID: b.ToolCallID, Output: &output})
		}
	}
	if m.Role == provider.RoleUser && text.Len() > 0 {
		out = append(out, inputItem{Type: "message", Role: "user", Content: text.String()})
	}
	return out
}

func assistantItems(m provider.Message) []inputItem {
	var out []inputItem
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			out = append(out, inputItem{Type: "message", Role: "assistant", Content: text.String()})
			text.Reset()
		}
	}
	for _, b := range m.Content {
		switch b.Type {
		case provider.BlockText:
			text.WriteString(b.Text)
		case provider.BlockToolCall:
			flush()
			out = append(out, inputItem{Type: "function_call", CallID: b.ToolCallID, Name: b.ToolName, Arguments: toolArguments(b)})
		case provider.BlockThinking:
			if b.ReasoningID == "" || b.EncryptedContent == "" {
				continue
			}
			flush()
			parts := make([]summaryPart, len(b.Summary))
			for i, s := range b.Summary {
				parts[i] = summaryPart{Type: "summary_text", Text: s}
			}
			out = append(out, inputItem{Type: "reasoning", ID: b.ReasoningID, Summary: &parts, EncryptedContent: b.EncryptedContent})
		}
	}
	flush()
	for len(out) > 0 && out[len(out)-1].Type == "reasoning" {
		out = out[:len(out)-1]
	}
	return out
}

// fingerprint identifies the model and the items of a context prefix.
func fingerprint(model string, perMessage [][]inputItem) [32]byte {
	h := sha256.New()
	h.Write([]byte(model))
	for _, its := range perMessage {
		h.Write([]byte{0})
		b, _ := json.Marshal(its)
		h.Write(b)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

func (c *Client) streamResponses(ctx context.Context, req *provider.Request, a *wire.Acc) provider.Result {
	perMessage := make([][]inputItem, len(req.Messages))
	for i, m := range req.Messages {
		perMessage[i] = items(m)
	}
	p := req.Params
	body := responsesRequest{
		Model: req.Model, Instructions: req.System, Input: []inputItem{},
		MaxOutputTokens: p.MaxTokens, Temperature: p.Temperature, TopP: p.TopP,
		Store: c.chain != nil, Stream: true,
	}
	if p.Thinking != nil {
		body.Reasoning = &reasoningParam{Effort: p.Thinking.Level(), Summary: "auto"}
	}
	if c.opts.EncryptedReasoning {
		body.Include = []string{includeEncryptedReasoning}
	}
	if !c.opts.NoPromptCache {
		body.PromptCacheKey = req.SessionID
	}
	for _, t := range req.Tools {
		body.Tools = append(body.Tools, responsesTool{Type: "function", Name: t.Name, Description: t.Description, Parameters: toolSchema(t)})
	}
	chained := c.chain != nil && req.SessionID != ""
	start := 0
	if chained {
		if st, ok := c.chain.get(req.SessionID); ok && st.covered < len(req.Messages) &&
			fingerprint(req.Model, perMessage[:st.covered]) == st.sum {
			body.PreviousResponseID, start = st.responseID, st.covered
		}
	}
	for _, its := range perMessage[start:] {
		body.Input = append(body.Input, its...)
	}
	hreq, err := c.newRequest(req, &body)
	if err != nil {
		return a.Fail("openai: "+err.Error(), "", nil)
	}
	st := &responsesStream{a: a}
	res := wire.Run(ctx, c.client, hreq, c.opts.Timeout, c.opts.ReadTimeout, a, st)

	switch res.Message.StopReason {
	case provider.StopError:
		if staleReplay(res) {
			// The server lost the chained state: forget it, so that the
			// retry sends the whole context.
			if c.chain != nil {
				c.chain.remove(req.SessionID)
			}
			res.ResetState = true
		}
	case provider.StopEnd, provider.StopToolUse, provider.StopLength:
		if chained && st.responseID != "" {
			all := append(perMessage, items(res.Message))
			c.chain.put(req.SessionID, chainState{
				responseID: st.responseID, covered: len(all), sum: fingerprint(req.Model, all),
			})
		}
	}
	return res
}

// Stale-replay wordings (docs/retry-policy.md §1.3).
var (
	staleItemRE   = regexp.MustCompile(`(?i)\bitem with id ['"][^'"]+['"] not found`)
	stalePrevRE   = regexp.MustCompile(`(?i)previous[ _]?response`)
	staleDetailRE = regexp.MustCompile(`(?i)not[ _]?found|invalid|expired|stale|zero[ _-]?data[ _-]?retention`)
)

// staleReplay reports whether a failed call is a stale Responses replay:
// code previous_response_not_found, "Item with id '…' not found", or a
// previous response that is not found, invalid or expired.
func staleReplay(res provider.Result) bool {
	if f := res.Failure; f != nil && f.Code == "previous_response_not_found" {
		return true
	}
	msg := res.Message.ErrorMessage
	return staleItemRE.MatchString(msg) || stalePrevRE.MatchString(msg) && staleDetailRE.MatchString(msg)
}

var _ wire.Handler = (*responsesStream)(nil)

// responsesStream is the state of one Responses stream.
type responsesStream struct {
	a          *wire.Acc
	responseID string
	refusal    strings.Builder
	// The fast path's keys (see handleDelta): the last item's id, and the
	// key of its text block at textIndex.
	lastItem, textItem, textKey string
	textIndex                   int
}

type responseObject struct {
	ID                string            `json:"id"`
	Status            string            `json:"status"`
	Error             *wire.ErrorObject `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Usage *openAIUsage `json:"usage"`
}

type responsesEvent struct {
	Type         string          `json:"type"`
	Response     *responseObject `json:"response"`
	ItemID       string          `json:"item_id"`
	OutputIndex  int             `json:"output_index"`
	ContentIndex int             `json:"content_index"`
	SummaryIndex int             `json:"summary_index"`
	Delta        json.RawMessage `json:"delta"`
	Arguments    *string         `json:"arguments"`
	Item         *struct {
		ID        string  `json:"id"`
		Type      string  `json:"type"`
		CallID    string  `json:"call_id"`
		Name      string  `json:"name"`
		Arguments *string `json:"arguments"`
		// Reasoning items.
		EncryptedContent string        `json:"encrypted_content"`
		Summary          []summaryPart `json:"summary"`
	} `json:"item"`
	// The error event, flat ({code, message, param}) or nested ({error: …}).
	Code    json.RawMessage   `json:"code"`
	Message string            `json:"message"`
	Error   *wire.ErrorObject `json:"error"`
}

// itemKey names an output item: its id, else its output index.
func itemKey(id string, outputIndex int) string {
	if id != "" {
		return id
	}
	return "#" + strconv.Itoa(outputIndex)
}

// decodeResponsesEvent is the reflective decode of any event.
func decodeResponsesEvent(data []byte) (responsesEvent, error) {
	var e responsesEvent
	err := json.Unmarshal(data, &e)
	return e, err
}

// Handle implements wire.Handler.
func (s *responsesStream) Handle(c *wire.Call, ev wire.Event) (*provider.Result, error) {
	var d responsesDelta
	if fastResponsesDelta(ev.Data, &d) {
		s.handleDelta(&d)
		return nil, nil
	}
	e, err := decodeResponsesEvent(ev.Data)
	if err != nil {
		return nil, fmt.Errorf("openai: unreadable %q event: %v", ev.Type, err)
	}
	if e.Type == "" {
		e.Type = ev.Type
	}
	a := s.a
	if r := e.Response; r != nil {
		if r.ID != "" {
			s.responseID = r.ID
		}
		if u := r.Usage; u != nil {
			a.Usage = u.usage()
		}
	}
	key := itemKey(e.ItemID, e.OutputIndex)
	var delta string
	_ = json.Unmarshal(e.Delta, &delta)
	switch e.Type {
	case "response.output_item.added", "response.output_item.done":
		if it := e.Item; it != nil && it.Type == "reasoning" {
			key = itemKey(it.ID, e.OutputIndex)
			a.StartThinking(key)
			if e.Type == "response.output_item.done" {
				var summary []string
				for _, p := range it.Summary {
					summary = append(summary, p.Text)
				}
				a.SetReasoning(key, it.ID, it.EncryptedContent, summary)
			}
		}
		if it := e.Item; it != nil && it.Type == "function_call" {
			key = itemKey(it.ID, e.OutputIndex)
			if !a.HasTool(key) {
				a.StartTool(key, it.CallID, it.Name)
				if it.Arguments != nil && e.Type == "response.output_item.added" {
					a.AddToolArgs(key, *it.Arguments)
				}
			}
			if e.Type == "response.output_item.done" {
				if err := a.EndTool(key, it.Arguments); err != nil {
					return nil, fmt.Errorf("openai: %v", err)
				}
			}
		}
	case "response.output_text.delta":
		a.AddText(key+"/text/"+strconv.Itoa(e.ContentIndex), delta)
	case "response.refusal.delta":
		s.refusal.WriteString(delta)
	case "response.reasoning_summary_part.added":
		// One block per reasoning item; its summary parts are separated by
		// a blank line, delivered as thinking too.
		if e.SummaryIndex > 0 {
			a.AddThinking(key, wire.ReasoningPartSeparator)
		}
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		a.AddThinking(key, delta)
	case "response.function_call_arguments.delta":
		a.AddToolArgs(key, delta)
	case "response.function_call_arguments.done":
		if err := a.EndTool(key, e.Arguments); err != nil {
			return nil, fmt.Errorf("openai: %v", err)
		}
	case "response.completed":
		r := s.completed()
		return &r, nil
	case "response.incomplete":
		r := s.incomplete(e.Response)
		return &r, nil
	case "response.failed":
		var ae wire.APIError
		if e.Response != nil && e.Response.Error != nil {
			ae = e.Response.Error.APIError()
		}
		if ae.Message == "" && ae.Code == "" {
			ae.Message = "the response failed (response.failed without an error)"
		}
		r := a.FailAPI(c, ae)
		return &r, nil
	case "error":
		eo := e.Error
		if eo == nil { // the flat shape
			eo = &wire.ErrorObject{Code: e.Code, Message: e.Message}
		}
		r := a.FailAPI(c, eo.APIError())
		return &r, nil
	}
	// response.created, response.in_progress and response.queued (the
	// lifecycle preamble) only carry the response's id: not observable.
	return nil, nil
}

// completed ends a stream that reached response.completed.
func (s *responsesStream) completed() provider.Result {
	a := s.a
	if s.refusal.Len() > 0 {
		return a.Fail("Refusal: "+s.refusal.String(), provider.DetailRefusal, nil)
	}
	if a.HasCompletedTool() {
		return a.Finish(provider.StopToolUse)
	}
	return a.Finish(provider.StopEnd)
}

// incomplete ends a stream that reached response.incomplete.
func (s *responsesStream) incomplete(r *responseObject) provider.Result {
	reason := ""
	if r != nil && r.IncompleteDetails != nil {
		reason = r.IncompleteDetails.Reason
	}
	if reason == "content_filter" {
		return s.a.Fail(`content_filter: the answer was stopped by the provider's content filter (incomplete_details.reason "content_filter")`, provider.DetailSensitive, nil)
	}
	return s.a.Finish(provider.StopLength) // max_output_tokens, and reasons to come
}

// Cut implements wire.Handler: it ends a stream that ended before its
// terminal event.
func (s *responsesStream) Cut(c *wire.Call, err error) provider.Result {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return s.a.Fail("stream ended before response.completed: "+err.Error(), "", c.Failure())
}
