package bedrock

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/agentd/agentd/internal/provider"
)

// input maps a request onto ConverseStream's input. Params go in
// inferenceConfig (maxTokens, temperature, topP, stopSequences); thinking
// is {"thinking": {"type": "enabled", "budget_tokens": Budget()}} in
// additionalModelRequestFields, with maxTokens raised to the budget plus
// Options.MaxTokens when it is not above the budget.
func (c *Client) input(req *provider.Request) (*bedrockruntime.ConverseStreamInput, error) {
	p := req.Params
	msgs, err := messages(req.Messages)
	if err != nil {
		return nil, err
	}
	if p.Thinking == nil {
		msgs = withoutFinalReasoning(msgs)
	}
	in := &bedrockruntime.ConverseStreamInput{ModelId: aws.String(req.Model), Messages: msgs}
	if req.System != "" {
		in.System = []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: req.System}}
	}
	ic := &types.InferenceConfiguration{StopSequences: p.StopSequences}
	if p.MaxTokens > 0 {
		ic.MaxTokens = aws.Int32(int32(p.MaxTokens))
	}
	if p.Temperature != nil {
		ic.Temperature = aws.Float32(float32(*p.Temperature))
	}
	if p.TopP != nil {
		ic.TopP = aws.Float32(float32(*p.TopP))
	}
	if th := p.Thinking; th != nil {
		budget := th.Budget()
		if p.MaxTokens <= budget {
			ic.MaxTokens = aws.Int32(int32(budget + c.opts.MaxTokens))
		}
		in.AdditionalModelRequestFields = document.NewLazyDocument(map[string]any{
			"thinking": map[string]any{"type": "enabled", "budget_tokens": budget},
		})
	}
	if ic.MaxTokens != nil || ic.Temperature != nil || ic.TopP != nil || len(ic.StopSequences) > 0 {
		in.InferenceConfig = ic
	}
	if len(req.Tools) > 0 {
		tc := &types.ToolConfiguration{}
		for _, t := range req.Tools {
			schema := map[string]any{"type": "object"}
			if len(t.InputSchema) > 0 {
				var m map[string]any
				if json.Unmarshal(t.InputSchema, &m) == nil && m != nil {
					schema = m
				}
			}
			spec := types.ToolSpecification{Name: aws.String(t.Name), InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(schema)}}
			if t.Description != "" {
				spec.Description = aws.String(t.Description)
			}
			tc.Tools = append(tc.Tools, &types.ToolMemberToolSpec{Value: spec})
		}
		in.ToolConfig = tc
	}
	return in, nil
}

// messages maps the runtime context onto Converse turns, as the anthropic
// kind does: user and tool messages are user turns (tool results become
// toolResult blocks, first in their turn), assistant messages assistant
// turns; an errored or aborted assistant message without content is
// skipped, and so is every message left without content; empty text is
// dropped; thinking with a signature goes back as reasoningText with its
// signature, redacted thinking as redactedContent, in their place;
// thinking without a signature (another kind's, or cut by a failure) is
// display only and dropped; consecutive turns of one role are merged.
func messages(msgs []provider.Message) ([]types.Message, error) {
	var out []types.Message
	for _, m := range msgs {
		var role types.ConversationRole
		switch m.Role {
		case provider.RoleUser, provider.RoleTool:
			role = types.ConversationRoleUser
		case provider.RoleAssistant:
			role = types.ConversationRoleAssistant
			if (m.StopReason == provider.StopError || m.StopReason == provider.StopAborted) && len(m.Content) == 0 {
				continue
			}
		default:
			continue
		}
		blocks, err := contentBlocks(role, m.Content)
		if err != nil {
			return nil, err
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			continue
		}
		out = append(out, types.Message{Role: role, Content: blocks})
	}
	for i := range out {
		if out[i].Role == types.ConversationRoleUser {
			out[i].Content = toolResultsFirst(out[i].Content)
		}
	}
	return out, nil
}

func toolResultsFirst(bs []types.ContentBlock) []types.ContentBlock {
	var results, rest []types.ContentBlock
	for _, b := range bs {
		if _, ok := b.(*types.ContentBlockMemberToolResult); ok {
			results = append(results, b)
		} else {
			rest = append(rest, b)
		}
	}
	return append(results, rest...)
}

// withoutFinalReasoning drops the reasoning blocks of a final assistant
// turn (a prefill) while thinking is off, which Claude on Bedrock refuses
// as the Messages API does.
func withoutFinalReasoning(msgs []types.Message) []types.Message {
	n := len(msgs)
	if n == 0 || msgs[n-1].Role != types.ConversationRoleAssistant {
		return msgs
	}
	var kept []types.ContentBlock
	for _, b := range msgs[n-1].Content {
		if _, ok := b.(*types.ContentBlockMemberReasoningContent); !ok {
			kept = append(kept, b)
		}
	}
	if len(kept) == 0 {
		return msgs[:n-1]
	}
	msgs[n-1].Content = kept
	return msgs
}

func contentBlocks(role types.ConversationRole, content []provider.Block) ([]types.ContentBlock, error) {
	assistant := role == types.ConversationRoleAssistant
	var out []types.ContentBlock
	for _, b := range content {
		switch b.Type {
		case provider.BlockText:
			if b.Text != "" {
				out = append(out, &types.ContentBlockMemberText{Value: b.Text})
			}
		case provider.BlockThinking:
			if assistant && b.Signature != "" {
				out = append(out, &types.ContentBlockMemberReasoningContent{Value: &types.ReasoningContentBlockMemberReasoningText{
					Value: types.ReasoningTextBlock{Text: aws.String(b.Text), Signature: aws.String(b.Signature)}}})
			}
		case provider.BlockRedactedThinking:
			data := b.Data
			if data == "" {
				data = b.Text
			}
			if assistant && data != "" {
				raw, err := base64.StdEncoding.DecodeString(data)
				if err != nil {
					// Another kind's redacted data (not base64 bytes): not
					// Bedrock's to take back.
					continue
				}
				out = append(out, &types.ContentBlockMemberReasoningContent{Value: &types.ReasoningContentBlockMemberRedactedContent{Value: raw}})
			}
		case provider.BlockToolCall:
			if assistant {
				var input any = map[string]any{}
				if len(b.ToolInput) > 0 {
					var v any
					if err := json.Unmarshal(b.ToolInput, &v); err == nil && v != nil {
						input = v
					}
				}
				out = append(out, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{
					ToolUseId: aws.String(b.ToolCallID), Name: aws.String(b.ToolName), Input: document.NewLazyDocument(input)}})
			}
		case provider.BlockToolResult:
			if !assistant {
				if b.ToolCallID == "" {
					return nil, fmt.Errorf("a tool result without a tool call id")
				}
				text := b.Text
				if text == "" {
					text = " " // Converse refuses an empty text block
				}
				tr := types.ToolResultBlock{ToolUseId: aws.String(b.ToolCallID),
					Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: text}}}
				if b.IsError {
					tr.Status = types.ToolResultStatusError
				}
				out = append(out, &types.ContentBlockMemberToolResult{Value: tr})
			}
		}
	}
	return out, nil
}
