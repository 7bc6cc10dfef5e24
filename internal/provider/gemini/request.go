package gemini

import (
	"encoding/json"

	"github.com/agentd/agentd/internal/provider"
)

// generateRequest is the body of models/{model}:streamGenerateContent.
type generateRequest struct {
	Contents          []content         `json:"contents"`
	SystemInstruction *content          `json:"systemInstruction,omitempty"`
	Tools             []tool            `json:"tools,omitempty"`
	GenerationConfig  *generationConfig `json:"generationConfig,omitempty"`
}

type content struct {
	Role  string `json:"role,omitempty"`
	Parts []part `json:"parts"`
}

// part is a Part of a Content, in a request and in a streamed answer.
type part struct {
	Text             string            `json:"text,omitempty"`
	Thought          bool              `json:"thought,omitempty"`
	ThoughtSignature string            `json:"thoughtSignature,omitempty"`
	FunctionCall     *functionCall     `json:"functionCall,omitempty"`
	FunctionResponse *functionResponse `json:"functionResponse,omitempty"`
}

// MarshalJSON writes a part that carries no data (a thought signature of
// its own) with an empty text, as Gemini itself streams it: a part needs
// one of its data fields.
func (p part) MarshalJSON() ([]byte, error) {
	type plain part
	if p.Text == "" && p.FunctionCall == nil && p.FunctionResponse == nil {
		return json.Marshal(struct {
			Text string `json:"text"`
			plain
		}{"", plain(p)})
	}
	return json.Marshal(plain(p))
}

type functionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type functionResponse struct {
	Name     string         `json:"name"`
	Response map[string]any `json:"response"`
}

type tool struct {
	FunctionDeclarations []functionDeclaration `json:"functionDeclarations"`
}

type functionDeclaration struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// ParametersJSONSchema takes a JSON Schema as it is (the older
	// "parameters" takes only an OpenAPI subset).
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema,omitempty"`
}

type generationConfig struct {
	MaxOutputTokens int             `json:"maxOutputTokens,omitempty"`
	Temperature     *float64        `json:"temperature,omitempty"`
	TopP            *float64        `json:"topP,omitempty"`
	StopSequences   []string        `json:"stopSequences,omitempty"`
	ThinkingConfig  *thinkingConfig `json:"thinkingConfig,omitempty"`
}

type thinkingConfig struct {
	IncludeThoughts bool `json:"includeThoughts"`
	ThinkingBudget  int  `json:"thinkingBudget"`
}

var objectSchema = json.RawMessage(`{"type":"object","properties":{}}`)

// requestBody maps a request. Params: maxOutputTokens, temperature, topP,
// stopSequences; Params.Thinking is thinkingConfig {includeThoughts: true,
// thinkingBudget: Budget()} (budget_tokens, else the effort's budget: low
// 1024, medium 4096, high 16384).
func requestBody(req *provider.Request) generateRequest {
	p := req.Params
	body := generateRequest{Contents: contents(req.Messages)}
	if req.System != "" {
		body.SystemInstruction = &content{Parts: []part{{Text: req.System}}}
	}
	gc := generationConfig{MaxOutputTokens: p.MaxTokens, Temperature: p.Temperature, TopP: p.TopP, StopSequences: p.StopSequences}
	if th := p.Thinking; th != nil {
		gc.ThinkingConfig = &thinkingConfig{IncludeThoughts: true, ThinkingBudget: th.Budget()}
	}
	if gc.MaxOutputTokens != 0 || gc.Temperature != nil || gc.TopP != nil || len(gc.StopSequences) > 0 || gc.ThinkingConfig != nil {
		body.GenerationConfig = &gc
	}
	if len(req.Tools) > 0 {
		var decls []functionDeclaration
		for _, t := range req.Tools {
			schema := t.InputSchema
			if len(schema) == 0 || !json.Valid(schema) {
				schema = objectSchema
			}
			decls = append(decls, functionDeclaration{Name: t.Name, Description: t.Description, ParametersJSONSchema: schema})
		}
		body.Tools = []tool{{FunctionDeclarations: decls}}
	}
	return body
}

// contents maps the runtime context onto Gemini contents:
//
//   - user and tool messages are "user" contents (tool results become
//     functionResponse parts, named after the call they answer, with
//     {"result": text} or, for an error, {"error": text}); assistant
//     messages "model" contents; other roles are skipped;
//   - an assistant message that ended in error or was aborted and has no
//     content is skipped, and so is any message left without parts;
//   - a thinking block with a signature (a Gemini thought signature, as the
//     stream delivered it) puts its signature on the part after it — the
//     part it came on — or, at the end of the message, on an empty text
//     part; thought text is not sent back, and thinking without a signature
//     (display only, or another kind's) nor redacted thinking either;
//   - consecutive contents of one role are merged.
func contents(msgs []provider.Message) []content {
	names := map[string]string{} // tool call id → name
	for _, m := range msgs {
		for _, b := range m.Content {
			if b.Type == provider.BlockToolCall {
				names[b.ToolCallID] = b.ToolName
			}
		}
	}
	out := []content{}
	for _, m := range msgs {
		var role string
		var parts []part
		switch m.Role {
		case provider.RoleUser, provider.RoleTool:
			role = "user"
			parts = userParts(m.Content, names)
		case provider.RoleAssistant:
			if (m.StopReason == provider.StopError || m.StopReason == provider.StopAborted) && len(m.Content) == 0 {
				continue
			}
			role = "model"
			parts = modelParts(m.Content)
		default:
			continue
		}
		if len(parts) == 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Parts = append(out[n-1].Parts, parts...)
			continue
		}
		out = append(out, content{Role: role, Parts: parts})
	}
	return out
}

func userParts(blocks []provider.Block, names map[string]string) []part {
	var out []part
	for _, b := range blocks {
		switch b.Type {
		case provider.BlockText:
			if b.Text != "" {
				out = append(out, part{Text: b.Text})
			}
		case provider.BlockToolResult:
			name := b.ToolName
			if name == "" {
				name = names[b.ToolCallID]
			}
			key := "result"
			if b.IsError {
				key = "error"
			}
			out = append(out, part{FunctionResponse: &functionResponse{Name: name, Response: map[string]any{key: b.Text}}})
		}
	}
	return out
}

func modelParts(blocks []provider.Block) []part {
	var out []part
	sig := ""
	add := func(p part) {
		p.ThoughtSignature, sig = sig, ""
		out = append(out, p)
	}
	for _, b := range blocks {
		switch b.Type {
		case provider.BlockThinking:
			if b.Signature != "" {
				if sig != "" {
					add(part{}) // a signature of its own, on an empty part
				}
				sig = b.Signature
			}
		case provider.BlockText:
			if b.Text != "" {
				add(part{Text: b.Text})
			}
		case provider.BlockToolCall:
			args := b.ToolInput
			if len(args) == 0 || !json.Valid(args) {
				args = json.RawMessage(`{}`)
			}
			add(part{FunctionCall: &functionCall{Name: b.ToolName, Args: args}})
		}
	}
	if sig != "" {
		add(part{})
	}
	return out
}
