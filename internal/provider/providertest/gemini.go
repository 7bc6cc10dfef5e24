package providertest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Gemini (Google AI) error bodies, byte for byte as the Gemini API sends
// them: pretty-printed with two-space indents, Google's error envelope
// {"error": {"code", "message", "status", "details": [google.rpc.*]}}.
// See docs/provider-formats.md.
const (
	// GeminiRateLimit is a per-minute quota's 429: QuotaFailure naming a
	// PerMinute quota, Help, and RetryInfo with the wait.
	GeminiRateLimit = `{
  "error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
          {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
            "quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier",
            "quotaDimensions": {
              "location": "global",
              "model": "gemini-2.5-flash"
            },
            "quotaValue": "250000"
          }
        ]
      },
      {
        "@type": "type.googleapis.com/google.rpc.Help",
        "links": [
          {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits"
          }
        ]
      },
      {
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": "45.837906927s"
      }
    ]
  }
}
`
	// GeminiDailyQuota is a per-day quota's 429: QuotaFailure naming a
	// PerDay quota, no RetryInfo.
	GeminiDailyQuota = `{
  "error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
          {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
            "quotaDimensions": {
              "location": "global",
              "model": "gemini-2.5-pro"
            },
            "quotaValue": "50"
          }
        ]
      },
      {
        "@type": "type.googleapis.com/google.rpc.Help",
        "links": [
          {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits"
          }
        ]
      }
    ]
  }
}
`
	GeminiUnavailable = `{
  "error": {
    "code": 503,
    "message": "The model is overloaded. Please try again later.",
    "status": "UNAVAILABLE"
  }
}
`
	GeminiInternal = `{
  "error": {
    "code": 500,
    "message": "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
    "status": "INTERNAL"
  }
}
`
	GeminiTokenCount = `{
  "error": {
    "code": 400,
    "message": "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575).",
    "status": "INVALID_ARGUMENT"
  }
}
`
	GeminiInvalidAPIKey = `{
  "error": {
    "code": 400,
    "message": "API key not valid. Please pass a valid API key.",
    "status": "INVALID_ARGUMENT",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
        "metadata": {
          "service": "generativelanguage.googleapis.com"
        }
      }
    ]
  }
}
`
	GeminiPermissionDenied = `{
  "error": {
    "code": 403,
    "message": "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
    "status": "PERMISSION_DENIED"
  }
}
`
	GeminiDeadlineExceeded = `{
  "error": {
    "code": 504,
    "message": "The request timed out. Please try again.",
    "status": "DEADLINE_EXCEEDED"
  }
}
`
	// geminiOverloadedEvent is the default mid-stream error (a data: frame).
	geminiOverloadedEvent = `{"error": {"code": 503,"message": "The model is overloaded. Please try again later.","status": "UNAVAILABLE"}}`
)

// GeminiNotFound is the 404 of an unknown model.
func GeminiNotFound(model string) string {
	return fmt.Sprintf(`{
  "error": {
    "code": 404,
    "message": "models/%s is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.",
    "status": "NOT_FOUND"
  }
}
`, model)
}

// GeminiRetryInfo is a per-minute 429 whose RetryInfo asks for delay (a
// google.protobuf.Duration's JSON: "45.837906927s", "26s").
func GeminiRetryInfo(delay string) string {
	return strings.Replace(GeminiRateLimit, `"retryDelay": "45.837906927s"`, `"retryDelay": `+jsonString(delay), 1)
}

// geminiBody is the Gemini body of an HTTP status.
func geminiBody(status int, model string) string {
	switch status {
	case 400:
		return GeminiTokenCount
	case 401:
		return GeminiInvalidAPIKey
	case 403:
		return GeminiPermissionDenied
	case 404:
		return GeminiNotFound(model)
	case 429:
		return GeminiRateLimit
	case 500:
		return GeminiInternal
	case 503:
		return GeminiUnavailable
	case 504:
		return GeminiDeadlineExceeded
	}
	return fmt.Sprintf("{\n  \"error\": {\n    \"code\": %d,\n    \"message\": %s,\n    \"status\": \"UNKNOWN\"\n  }\n}\n", status, jsonString(statusText(status)))
}

// GeminiSignature is the thought signature the fake gives a model's
// thinking for an account: bound to both (thought text is not sent back
// to Gemini, so a signature cannot be bound to it).
func GeminiSignature(account, model string) string {
	return "gemini:" + AnthropicSignature(account, model, "")
}

// GeminiInvalidSignature is the fake's 400 for a thought signature made
// for another model or account, or altered. The wording is agentd's
// assumption (docs/provider-formats.md §4.5).
const GeminiInvalidSignature = `{
  "error": {
    "code": 400,
    "message": "Unable to submit request because Thought signature is not valid.",
    "status": "INVALID_ARGUMENT"
  }
}
`

// checkGemini refuses a request whose history holds a thought signature
// that is not the account's for the model.
func checkGemini(account, model string, body []byte) (Step, bool) {
	var req struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				ThoughtSignature string `json:"thoughtSignature"`
			} `json:"parts"`
		} `json:"contents"`
	}
	if json.Unmarshal(body, &req) != nil {
		return Step{}, false
	}
	want := GeminiSignature(account, model)
	for _, c := range req.Contents {
		for _, p := range c.Parts {
			if p.ThoughtSignature != "" && p.ThoughtSignature != want {
				return RawError(400, GeminiInvalidSignature), true
			}
		}
	}
	return Step{}, false
}

// geminiModel is the model a Gemini path names
// (…/models/{model}:streamGenerateContent).
func geminiModel(path string) string {
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return ""
	}
	m, _, _ := strings.Cut(path[i+len("/models/"):], ":")
	return m
}

// ---- Gemini streamGenerateContent?alt=sse (data: frames, \r\n\r\n) ----

// geminiFrame is one data: frame as the Gemini API ends it.
func geminiFrame(data string) string { return "data: " + data + "\r\n\r\n" }

// gj writes JSON the way the Gemini API streams it: ": " after keys, ","
// between members.
func gj(v any) string {
	var b strings.Builder
	encStyle(&b, ",", ": ", v)
	return b.String()
}

func geminiPlan(si streamInfo, a *Answer) plan {
	id := a.ID
	if id == "" {
		id = si.id("gemresp")
	}
	in, out := usage(a)
	thoughts := 0
	if len(a.Thinking) > 0 {
		thoughts = len(a.Thinking)
	}
	sent := 0 // output tokens streamed so far (one per delta)
	um := func(final bool) obj {
		n := sent
		if final {
			n = out
		}
		// promptTokenCount includes the cached part (InputTokens is the
		// rest, as agentd counts it).
		prompt := in + a.CacheReadTokens
		u := obj{{"promptTokenCount", prompt}, {"candidatesTokenCount", n}, {"totalTokenCount", prompt + n + thoughts},
			{"promptTokensDetails", arr{obj{{"modality", "TEXT"}, {"tokenCount", prompt}}}}}
		if a.CacheReadTokens > 0 {
			u = append(u, kv{"cachedContentTokenCount", a.CacheReadTokens})
		}
		if thoughts > 0 {
			u = append(u, kv{"thoughtsTokenCount", thoughts})
		}
		return u
	}
	chunk := func(parts arr, finish string, final bool) string {
		cand := obj{{"content", obj{{"parts", parts}, {"role", "model"}}}}
		if finish != "" {
			cand = append(cand, kv{"finishReason", finish})
		}
		cand = append(cand, kv{"index", 0})
		return geminiFrame(gj(obj{{"candidates", arr{cand}}, {"usageMetadata", um(final)},
			{"modelVersion", si.model}, {"responseId", id}}))
	}
	var p plan
	sig := ""
	if len(a.Thinking) > 0 || a.EmptyThinking {
		sig = GeminiSignature(si.account, si.model)
	}
	for _, t := range a.Thinking {
		p.body = append(p.body, chunk(arr{obj{{"text", t}, {"thought", true}}}, "", false))
	}
	// The signature comes on the first part after the thoughts.
	withSig := func(o obj) obj {
		if sig != "" {
			o = append(o, kv{"thoughtSignature", sig})
			sig = ""
		}
		return o
	}
	for _, t := range a.Text {
		sent++
		p.body = append(p.body, chunk(arr{withSig(obj{{"text", t}})}, "", false))
	}
	for _, t := range a.Tools {
		args := strings.Join(t.Args, "")
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		fc := obj{{"name", t.Name}, {"args", rawJSON(args)}}
		if t.ID != "" {
			fc = append(obj{{"id", t.ID}}, fc...)
		}
		sent++
		p.body = append(p.body, chunk(arr{withSig(obj{{"functionCall", fc}})}, "", false))
	}
	finish := "STOP"
	switch a.Stop {
	case StopLength:
		finish = "MAX_TOKENS"
	case StopRefusal, StopContentFilter:
		finish = "SAFETY"
	}
	p.terminal = []string{chunk(arr{withSig(obj{{"text", ""}})}, finish, true)}

	p.errFrames = func(s *Step, _ int) []string {
		if s.ErrorType == "" && s.ErrorMessage == "" {
			return []string{geminiFrame(geminiOverloadedEvent)}
		}
		code := 500
		if s.ErrorCode != "" {
			_, _ = fmt.Sscan(s.ErrorCode, &code)
		}
		return []string{geminiFrame(gj(obj{{"error", obj{{"code", code}, {"message", s.ErrorMessage}, {"status", s.ErrorType}}}}))}
	}
	return p
}
