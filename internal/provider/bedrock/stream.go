package bedrock

import (
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/wire"
)

// stream is the state of one ConverseStream.
type stream struct {
	a       *wire.Acc
	started bool   // messageStart seen
	stopped bool   // messageStop seen
	stop    string // its stopReason
}

func key(i *int32) string { return strconv.Itoa(int(aws.ToInt32(i))) }

// handle interprets one event.
func (s *stream) handle(ev types.ConverseStreamOutput) error {
	a := s.a
	switch e := ev.(type) {
	case *types.ConverseStreamOutputMemberMessageStart:
		s.started = true
	case *types.ConverseStreamOutputMemberContentBlockStart:
		if tu, ok := e.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
			a.StartTool(key(e.Value.ContentBlockIndex), aws.ToString(tu.Value.ToolUseId), aws.ToString(tu.Value.Name))
		}
	case *types.ConverseStreamOutputMemberContentBlockDelta:
		k := key(e.Value.ContentBlockIndex)
		switch d := e.Value.Delta.(type) {
		case *types.ContentBlockDeltaMemberText:
			a.AddText(k, d.Value)
		case *types.ContentBlockDeltaMemberToolUse:
			a.AddToolArgs(k, aws.ToString(d.Value.Input))
		case *types.ContentBlockDeltaMemberReasoningContent:
			switch r := d.Value.(type) {
			case *types.ReasoningContentBlockDeltaMemberText:
				a.StartThinking(k)
				a.AddThinking(k, r.Value)
			case *types.ReasoningContentBlockDeltaMemberSignature:
				a.AddSignature(k, r.Value)
			case *types.ReasoningContentBlockDeltaMemberRedactedContent:
				a.AddRedactedThinking(k, base64.StdEncoding.EncodeToString(r.Value))
			}
		}
	case *types.ConverseStreamOutputMemberContentBlockStop:
		if err := a.EndTool(key(e.Value.ContentBlockIndex), nil); err != nil {
			return err
		}
	case *types.ConverseStreamOutputMemberMessageStop:
		s.stopped, s.stop = true, string(e.Value.StopReason)
	case *types.ConverseStreamOutputMemberMetadata:
		if u := e.Value.Usage; u != nil {
			// inputTokens counts neither cache reads nor writes (as
			// Anthropic's input_tokens): the three add up to the prompt.
			a.Usage.InputTokens = int64(aws.ToInt32(u.InputTokens))
			a.Usage.CacheReadTokens = int64(aws.ToInt32(u.CacheReadInputTokens))
			a.Usage.CacheWriteTokens = int64(aws.ToInt32(u.CacheWriteInputTokens))
			a.Usage.OutputTokens = int64(aws.ToInt32(u.OutputTokens))
		}
	}
	return nil
}

// end ends a stream whose events ended without an error.
func (s *stream) end(c *callState) provider.Result {
	a := s.a
	if !s.stopped {
		what := "messageStop"
		if !s.started {
			what = "messageStart"
		}
		return a.Fail("bedrock stream ended before "+what+": unexpected EOF", "", c.failure())
	}
	if err := a.EndTools(); err != nil {
		return a.Fail("bedrock: "+err.Error(), "", c.failure())
	}
	switch types.StopReason(s.stop) {
	case types.StopReasonMaxTokens, types.StopReasonModelContextWindowExceeded:
		return a.Finish(provider.StopLength)
	case types.StopReasonToolUse:
		return a.Finish(provider.StopToolUse)
	case types.StopReasonGuardrailIntervened, types.StopReasonContentFiltered:
		return a.Fail(fmt.Sprintf("content filtered (stopReason %q)", s.stop), provider.DetailSensitive, nil)
	case types.StopReasonMalformedModelOutput, types.StopReasonMalformedToolUse:
		return a.Fail(fmt.Sprintf("the model's output could not be parsed (stopReason %q)", s.stop), "", c.failure())
	default: // end_turn, stop_sequence, and stop reasons to come
		return a.Finish(provider.StopEnd)
	}
}
