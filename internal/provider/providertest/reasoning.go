package providertest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentd/agentd/internal/provider"
)

// The fake keeps the providers' real rules for reasoning state:
//
//   - Anthropic signs every thinking block it streams with a signature bound
//     to the account of the request's API key (Options.Accounts), the model
//     and the thinking text, and refuses a request whose history holds a
//     thinking block with a missing, altered or foreign signature (another
//     model's or account's): 400 invalid_request_error "messages.I.content.J:
//     Invalid `signature` in `thinking` block". With thinking enabled, the
//     final assistant message of an open tool loop (the one whose tool_use
//     blocks the last user message answers with tool_result blocks) must
//     start with a thinking or redacted_thinking block, else 400 with
//     AnthropicThinkingOrderFormat. redacted_thinking data is not checked:
//     the wording of its rejection is not known.
//   - OpenAI Responses gives every reasoning item encrypted_content bound to
//     the organisation of the request's key, when the request includes
//     "reasoning.encrypted_content", and refuses a reasoning input item whose
//     encrypted content another organisation made or that was altered: 400
//     invalid_encrypted_content (OpenAIInvalidEncryptedContent). A reasoning
//     item without encrypted content under store: false names state that was
//     never kept: 404 (OpenAIItemNotFound).
//
// Options.NoReasoningChecks turns the checks off.

// DefaultAccount is the account (Anthropic) or organisation (OpenAI) of a
// key that Options.Accounts does not map.
const DefaultAccount = "default"

// AnthropicThinkingOrderFormat is Anthropic's wording, byte for byte, for a
// final assistant message of an open tool loop that does not start with a
// thinking block while thinking is enabled; the verbs are the message's
// index and the type of its first block. "preceeding" is the API's own
// spelling.
const AnthropicThinkingOrderFormat = "messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. " +
	"When `thinking` is enabled, a final `assistant` message must start with a thinking block " +
	"(preceeding the lastmost set of `tool_use` and `tool_result` blocks). " +
	"We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. " +
	"Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"

// AnthropicInvalidSignatureFormat is Anthropic's wording for a thinking
// block whose signature is missing, altered or foreign; the verbs are the
// message's and the block's indexes.
const AnthropicInvalidSignatureFormat = "messages.%d.content.%d: Invalid `signature` in `thinking` block"

// AnthropicInvalidSignature is the 400 body for the thinking block at
// messages[msg].content[block].
func AnthropicInvalidSignature(msg, block int) string {
	return anthropicInvalidRequest(fmt.Sprintf(AnthropicInvalidSignatureFormat, msg, block))
}

// AnthropicThinkingOrder is the 400 body for the assistant message at
// messages[msg] starting with a block of type found.
func AnthropicThinkingOrder(msg int, found string) string {
	return anthropicInvalidRequest(fmt.Sprintf(AnthropicThinkingOrderFormat, msg, found))
}

func anthropicInvalidRequest(msg string) string {
	return `{"type":"error","error":{"type":"invalid_request_error","message":` + jsonString(msg) + `}}`
}

// OpenAI's wordings for encrypted content it cannot verify.
const (
	// OpenAIEncryptedContentFormat: the verb is the reasoning item's id.
	OpenAIEncryptedContentFormat = "The encrypted content for item %s could not be verified."
	// OpenAIForeignOrganizationReason follows it for content another
	// organisation made.
	OpenAIForeignOrganizationReason = " Reason: Encrypted content organization_id did not match the target organization."
)

// OpenAIInvalidEncryptedContent is the 400 body for the reasoning item id
// whose encrypted content could not be verified; foreign adds the reason
// OpenAI gives for content of another organisation.
func OpenAIInvalidEncryptedContent(id string, foreign bool) string {
	msg := fmt.Sprintf(OpenAIEncryptedContentFormat, id)
	if foreign {
		msg += OpenAIForeignOrganizationReason
	}
	return `{"error":{"message":` + jsonString(msg) + `,"type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}`
}

// reasoningKey keys the fake's signatures; they are deterministic.
var reasoningKey = []byte("providertest reasoning state")

func reasoningMAC(parts ...string) []byte {
	m := hmac.New(sha256.New, reasoningKey)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// AnthropicSignature is the signature the fake gives a thinking block with
// text thinking, made by model for account. Tests use it to forge a
// foreign one.
func AnthropicSignature(account, model, thinking string) string {
	return base64.StdEncoding.EncodeToString(reasoningMAC("anthropic", account, model, thinking))
}

// orgTag identifies an organisation inside its encrypted content.
func orgTag(org string) []byte {
	sum := sha256.Sum256([]byte("org\x00" + org))
	return sum[:6]
}

// OpenAIEncryptedContent is the encrypted_content the fake gives the
// reasoning item id for the organisation org (Fernet-like, as OpenAI's:
// "gAAAAAB…").
func OpenAIEncryptedContent(org, id string) string {
	return "gAAAAAB" + base64.URLEncoding.EncodeToString(append(orgTag(org), reasoningMAC("openai", org, id)...))
}

// verifyEncrypted reports whether enc is org's content for item id, and
// when not whether it is another organisation's (well formed, another
// organisation's tag).
func verifyEncrypted(org, id, enc string) (ok, foreign bool) {
	if enc == OpenAIEncryptedContent(org, id) {
		return true, false
	}
	raw, err := base64.URLEncoding.DecodeString(strings.TrimPrefix(enc, "gAAAAAB"))
	if err != nil || !strings.HasPrefix(enc, "gAAAAAB") || len(raw) != 6+sha256.Size {
		return false, false
	}
	return false, !bytes.Equal(raw[:6], orgTag(org))
}

// account is the account (organisation) of an API key.
func (h *Handler) account(key string) string {
	if a, ok := h.opts.Accounts[key]; ok {
		return a
	}
	return DefaultAccount
}

// checkReasoning applies the kind's reasoning rules to a request body; it
// returns the rejection to play, if any.
func (h *Handler) checkReasoning(kind, key, model string, body []byte) (Step, bool) {
	if h.opts.NoReasoningChecks {
		return Step{}, false
	}
	switch kind {
	case provider.KindAnthropic:
		return checkAnthropic(h.account(key), body)
	case provider.KindOpenAIResponses:
		return checkResponses(h.account(key), body)
	case provider.KindGemini:
		return checkGemini(h.account(key), model, body)
	}
	return Step{}, false
}

func checkAnthropic(account string, body []byte) (Step, bool) {
	var req struct {
		Model    string `json:"model"`
		Thinking *struct {
			Type string `json:"type"`
		} `json:"thinking"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return Step{}, false
	}
	contents := make([][]anthropicBlock, len(req.Messages))
	for i, m := range req.Messages {
		_ = json.Unmarshal(m.Content, &contents[i]) // a string content has no blocks
		if m.Role != "assistant" {
			continue
		}
		for j, b := range contents[i] {
			if b.Type != "thinking" {
				continue
			}
			if b.Thinking == nil || b.Signature == nil || *b.Signature != AnthropicSignature(account, req.Model, *b.Thinking) {
				return RawError(http.StatusBadRequest, AnthropicInvalidSignature(i, j)), true
			}
		}
	}
	if req.Thinking == nil || req.Thinking.Type != "enabled" {
		return Step{}, false
	}
	// The lastmost tool_use / tool_result set: the last message answers
	// the assistant message before it with tool results.
	n := len(req.Messages)
	if n < 2 || req.Messages[n-1].Role != "user" || req.Messages[n-2].Role != "assistant" ||
		!hasBlock(contents[n-1], "tool_result") || !hasBlock(contents[n-2], "tool_use") {
		return Step{}, false
	}
	if first := contents[n-2][0].Type; first != "thinking" && first != "redacted_thinking" {
		return RawError(http.StatusBadRequest, AnthropicThinkingOrder(n-2, first)), true
	}
	return Step{}, false
}

// anthropicBlock is what the checks read of a request's content block.
type anthropicBlock struct {
	Type      string  `json:"type"`
	Thinking  *string `json:"thinking"`
	Signature *string `json:"signature"`
}

func hasBlock(blocks []anthropicBlock, typ string) bool {
	for _, b := range blocks {
		if b.Type == typ {
			return true
		}
	}
	return false
}

func checkResponses(org string, body []byte) (Step, bool) {
	var req struct {
		Store *bool           `json:"store"`
		Input json.RawMessage `json:"input"`
	}
	if json.Unmarshal(body, &req) != nil {
		return Step{}, false
	}
	var items []struct {
		Type             string  `json:"type"`
		ID               string  `json:"id"`
		EncryptedContent *string `json:"encrypted_content"`
	}
	_ = json.Unmarshal(req.Input, &items) // a string input has no items
	stored := req.Store == nil || *req.Store
	for _, it := range items {
		if it.Type != "reasoning" {
			continue
		}
		if it.EncryptedContent == nil || *it.EncryptedContent == "" {
			if !stored {
				return RawError(http.StatusNotFound, OpenAIItemNotFound(it.ID)), true
			}
			continue
		}
		if ok, foreign := verifyEncrypted(org, it.ID, *it.EncryptedContent); !ok {
			return RawError(http.StatusBadRequest, OpenAIInvalidEncryptedContent(it.ID, foreign)), true
		}
	}
	return Step{}, false
}
