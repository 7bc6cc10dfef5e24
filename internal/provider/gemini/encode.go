package gemini

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/agentd/agentd/internal/jsonenc"
)

// encodeRequest is json.Marshal(body), byte for byte, written without
// reflection into one buffer at about the body's size: a history is re-sent
// on every model call, and encoding/json took each part through part's
// MarshalJSON, a json.Marshal of its own. What it does not write itself (a
// float JSON cannot hold, a schema or arguments that are not JSON, a
// function response value that is not a string) it leaves to
// json.Marshal, error and all. TestEncodeRequestIsMarshal and
// FuzzEncodeRequest hold it to json.Marshal's output.
func encodeRequest(body *generateRequest) ([]byte, error) {
	b, ok := appendRequest(make([]byte, 0, requestSize(body)), body)
	if !ok {
		return json.Marshal(body)
	}
	return b, nil
}

// requestSize is about the size of body's JSON: its strings and raw JSON
// unescaped, plus room for the names and punctuation around them.
func requestSize(body *generateRequest) int {
	n := 256
	for i := range body.Contents {
		n += contentSize(&body.Contents[i])
	}
	if body.SystemInstruction != nil {
		n += contentSize(body.SystemInstruction)
	}
	for _, t := range body.Tools {
		for _, d := range t.FunctionDeclarations {
			n += 64 + len(d.Name) + len(d.Description) + len(d.ParametersJSONSchema)
		}
	}
	if gc := body.GenerationConfig; gc != nil {
		for _, s := range gc.StopSequences {
			n += 4 + len(s)
		}
	}
	return n
}

func contentSize(c *content) int {
	n := 32 + len(c.Role)
	for i := range c.Parts {
		p := &c.Parts[i]
		n += 64 + len(p.Text) + len(p.ThoughtSignature)
		if f := p.FunctionCall; f != nil {
			n += 48 + len(f.ID) + len(f.Name) + len(f.Args)
		}
		if r := p.FunctionResponse; r != nil {
			n += 48 + len(r.Name)
			for k, v := range r.Response {
				n += 8 + len(k)
				if s, ok := v.(string); ok {
					n += len(s)
				}
			}
		}
	}
	return n
}

// appendRequest appends body's JSON to b, its fields in generateRequest's
// order, the empty ones left out as its omitempty tags say; false:
// json.Marshal's to write.
func appendRequest(b []byte, body *generateRequest) ([]byte, bool) {
	var ok bool
	b = append(b, `{"contents":`...)
	if body.Contents == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range body.Contents {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendContent(b, &body.Contents[i]); !ok {
				return b, false
			}
		}
		b = append(b, ']')
	}
	if body.SystemInstruction != nil {
		b = append(b, `,"systemInstruction":`...)
		if b, ok = appendContent(b, body.SystemInstruction); !ok {
			return b, false
		}
	}
	if len(body.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i, t := range body.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"functionDeclarations":`...)
			if t.FunctionDeclarations == nil {
				b = append(b, "null"...)
			} else {
				b = append(b, '[')
				for j, d := range t.FunctionDeclarations {
					if j > 0 {
						b = append(b, ',')
					}
					b = append(b, `{"name":`...)
					b = jsonenc.AppendString(b, d.Name)
					b = jsonenc.AppendStringField(b, "description", d.Description)
					if len(d.ParametersJSONSchema) > 0 {
						b = append(b, `,"parametersJsonSchema":`...)
						if b, ok = jsonenc.AppendRaw(b, d.ParametersJSONSchema); !ok {
							return b, false
						}
					}
					b = append(b, '}')
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if gc := body.GenerationConfig; gc != nil {
		b = append(b, `,"generationConfig":{`...)
		start := len(b)
		if gc.MaxOutputTokens != 0 {
			b = append(b, `,"maxOutputTokens":`...)
			b = strconv.AppendInt(b, int64(gc.MaxOutputTokens), 10)
		}
		if b, ok = jsonenc.AppendFloatField(b, "temperature", gc.Temperature); !ok {
			return b, false
		}
		if b, ok = jsonenc.AppendFloatField(b, "topP", gc.TopP); !ok {
			return b, false
		}
		b = jsonenc.AppendStringsField(b, "stopSequences", gc.StopSequences)
		if t := gc.ThinkingConfig; t != nil {
			b = append(b, `,"thinkingConfig":{"includeThoughts":`...)
			b = strconv.AppendBool(b, t.IncludeThoughts)
			b = append(b, `,"thinkingBudget":`...)
			b = strconv.AppendInt(b, int64(t.ThinkingBudget), 10)
			b = append(b, '}')
		}
		if len(b) > start {
			// The fields were written each with a leading comma.
			b = append(b[:start], b[start+1:]...)
		}
		b = append(b, '}')
	}
	return append(b, '}'), true
}

// appendContent appends one content; false for what json.Marshal is to
// write.
func appendContent(b []byte, c *content) ([]byte, bool) {
	b = append(b, '{')
	if c.Role != "" {
		b = append(b, `"role":`...)
		b = jsonenc.AppendString(b, c.Role)
		b = append(b, ',')
	}
	b = append(b, `"parts":`...)
	if c.Parts == nil {
		return append(b, "null}"...), true
	}
	b = append(b, '[')
	var ok bool
	for i := range c.Parts {
		if i > 0 {
			b = append(b, ',')
		}
		if b, ok = appendPart(b, &c.Parts[i]); !ok {
			return b, false
		}
	}
	return append(b, "]}"...), true
}

// appendPart appends a part as its MarshalJSON writes it: a part without
// data with an empty text first.
func appendPart(b []byte, p *part) ([]byte, bool) {
	b = append(b, '{')
	start := len(b)
	if p.Text == "" && p.FunctionCall == nil && p.FunctionResponse == nil {
		b = append(b, `,"text":""`...)
	}
	b = jsonenc.AppendStringField(b, "text", p.Text)
	if p.Thought {
		b = append(b, `,"thought":true`...)
	}
	b = jsonenc.AppendStringField(b, "thoughtSignature", p.ThoughtSignature)
	var ok bool
	if f := p.FunctionCall; f != nil {
		b = append(b, `,"functionCall":{`...)
		if f.ID != "" {
			b = append(b, `"id":`...)
			b = jsonenc.AppendString(b, f.ID)
			b = append(b, ',')
		}
		b = append(b, `"name":`...)
		b = jsonenc.AppendString(b, f.Name)
		if len(f.Args) > 0 {
			b = append(b, `,"args":`...)
			if b, ok = jsonenc.AppendRaw(b, f.Args); !ok {
				return b, false
			}
		}
		b = append(b, '}')
	}
	if r := p.FunctionResponse; r != nil {
		b = append(b, `,"functionResponse":{"name":`...)
		b = jsonenc.AppendString(b, r.Name)
		b = append(b, `,"response":`...)
		if b, ok = appendStringMap(b, r.Response); !ok {
			return b, false
		}
		b = append(b, '}')
	}
	if len(b) > start {
		b = append(b[:start], b[start+1:]...) // the first field's comma
	}
	return append(b, '}'), true
}

// appendStringMap appends m as json.Marshal does (null when nil, the keys
// sorted); false unless every value is a string.
func appendStringMap(b []byte, m map[string]any) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), true
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if _, ok := v.(string); !ok {
			return b, false
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, k)
		b = append(b, ':')
		b = jsonenc.AppendString(b, m[k].(string))
	}
	return append(b, '}'), true
}
