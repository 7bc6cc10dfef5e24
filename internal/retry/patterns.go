package retry

import (
	"strings"

	"github.com/agentd/agentd/internal/retry/internal/match"
)

// The literal index of the patterns below (package variables, compiled
// before any init runs).
func init() { match.Build() }

// The classifier's phrase families. Every pattern runs on words(message):
// camelCase split, lower case. Word patterns start with lead, a leading word
// boundary that (unlike \b) treats '_' as a separator, so snake_case codes
// such as "rate_limit_error" match while "Unterminated" does not match
// "terminated" and "Generate" does not match "rate". Three-digit status
// numbers are not matched here but by standaloneNumbers.

// overflowStrongRE: context-overflow wordings (docs/retry-policy.md §1.2: the
// reference's list, plus the wordings of providers it does not list). A
// match makes the failure a context overflow whatever else the text says.
// The reference's patterns with unbounded gaps are in overflowGapped.
var overflowStrongRE = match.AnyPhrases(
	// reference (OVERFLOW_PATTERNS)
	`prompt is too long`,                    // Anthropic
	`input is too long for requested model`, // Amazon Bedrock
	`exceeds the context window`,            // OpenAI Responses / Completions
	`maximum prompt length is \d+`,          // xAI
	`reduce the length of the messages`,     // Groq, OpenAI
	`maximum context length is \d+ tokens`,  // OpenRouter, OpenAI, DeepSeek, vLLM
	`exceeds the available context size`,    // llama.cpp server
	`greater than the context length`,       // LM Studio
	`context window exceeds limit`,          // MiniMax
	`exceeded model token limit`,            // Kimi
	`context[_ ]length[_ ]exceeded`,
	`request_too_large`, // Anthropic 413
	`request exceeds the maximum size`,
	`payload too large`,
	`entity too large`,
	`model_context_window_exceeded`,                 // z.ai finish_reason
	`prompt filled the context window`,              // Ollama OpenAI-compatible
	`\b4(?:00|13)\s*(?:status code)?\s*\(no body\)`, // Cerebras, Mistral bare 400/413
	// beyond the reference
	"exceeds? (?:the )?context limit",                // Anthropic "input length and `max_tokens` exceed context limit"
	`maximum context length`,                         // Mistral "… too large for model with 32768 maximum context length", Fireworks, Ollama
	`input token count is \d+ but`,                   // Vertex AI "… but model only supports up to N"
	`request too large for`,                          // OpenAI / Groq TPM: a request that can never fit
	`tokens must be reduced`,                         // OpenAI "The input or output tokens must be reduced"
	`too many input tokens`,                          // Amazon Titan
	`tokens in the prompt cannot exceed`,             // Cohere
	`longer than the maximum model length`,           // vLLM decoder prompt
	`larger than the (?:max(?:imum)? )?context size`, // llama.cpp
	`must have less than \d+ tokens`,                 // TGI / Hugging Face
	"tokens \\+ `?max_new_tokens`? must be <=",       // TGI / Together
	`context_window_exceeded`,
	`input length exceeds`, // Ollama, generic
)

// overflowGapped are the reference's overflow patterns with unbounded gaps.
// The gaps make them the most expensive patterns by far: their prefilter
// (every literal part present) keeps them from running on most messages.
var overflowGapped = match.AnyPhrases(
	`input token count.*exceeds the maximum`, // Google Gemini
	`requested tokens?.*exceed.*context (?:window|length|size)`,
	`context (?:window|length|size).*(?:exceeded|overflow|too small)`,
	`(?:prompt|input).*(?:too long|too large).*(?:context|n_ctx)`,
	`requested tokens?.*(?:exceeds?|greater than).*(?:n_ctx|context)`,
	`\b413\b.*\b(?:request|payload|entity)\b.*\btoo large\b`,
)

// overflowWeakRE: overflow wordings that throttling messages share ("Too many
// tokens, please wait before trying again" is AWS throttling). They count only
// when the text carries no throttling signal (throttleRE, status 429).
var overflowWeakRE = match.AnyPhrases(
	`too many tokens`,
	`token limit exceeded`,
	`exceeds the limit of \d+`, // GitHub Copilot
)

// throttleRE: wording of per-period throttling, which vetoes overflowWeakRE.
var throttleRE = match.AnyPhrases(
	`per.?(?:minute|min|second|sec|hour|day)\b`,
	`\b(?:tpm|rpm|tpd|rpd)\b`,
	`rate.?limit`,
	`please wait`,
	`wait before`,
	`try again in`,
	`throttl`,
	`this minute`,
)

// staleItemRE and stalePrevRE/staleDetailRE: the stale OpenAI Responses replay
// (docs/retry-policy.md §1.3).
var (
	staleItemRE   = match.WordPhrases(`item with id ['"][^'"]+['"] not found`)
	stalePrevRE   = match.Compile(`previous[ _]?response`)
	staleDetailRE = match.Compile(`not[ _]?found|invalid|expired|stale|zero[ _-]?data[ _-]?retention`)
)

// staleReasoningRE: a provider refusing reasoning state replayed to it, one
// family per case (staleReasoningCases): Anthropic thinking blocks it
// refuses ("messages.1.content.0: Invalid `signature` in `thinking` block",
// quotes optional as proxies rewrite them; "`thinking` or
// `redacted_thinking` blocks in the latest assistant message cannot be
// modified"; "If an assistant message contains any thinking blocks, the
// first block must be `thinking` or `redacted_thinking`"; "When thinking is
// disabled, an `assistant` message in the final position cannot contain
// `thinking`"); the thinking-first rule
// of a tool loop ("messages.1.content.0.type: Expected `thinking` or
// `redacted_thinking`, but found `text`. When `thinking` is enabled, a
// final `assistant` message must start with a thinking block …"); OpenAI
// encrypted content it cannot verify; a Gemini thought signature it refuses
// ("Thought signature is not valid", an assumed wording:
// docs/provider-formats.md §1.5) is the signature case; OpenAI
// encrypted content it cannot verify ("The encrypted content for item rs_…
// could not be verified.", "The encrypted content gAAA… could not be
// verified. Reason: Encrypted content organization_id did not match the
// target organization.", "… could not be decrypted or parsed.").
var staleReasoningRE = []match.Phrases{
	match.WordPhrases(
		`invalid .?signature.? in .?thinking.? block`,
		`blocks in the latest assistant message cannot be modified`,
		`thinking blocks, the first block must be .?thinking`,
		`message in the final position cannot contain .?thinking`,
		`thought signature is not valid`,
	),
	match.WordPhrases(
		`must start with a thinking block`,
		`expected .?thinking.? or .?redacted_thinking.?, but found`,
	),
	match.WordPhrases(
		`invalid_encrypted_content`,
		`encrypted content.*could not be (?:verified|decrypted)`,
		`encrypted content organization.?id did not match`,
	),
}

// staleReasoningCases are the cases of staleReasoningRE's families.
var staleReasoningCases = []StaleCase{StaleReasoningSignature, StaleReasoningOrder, StaleReasoningEncrypted}

// transientRE: the transient transport/envelope families of
// docs/retry-policy.md §1.7 (the reference's TRANSIENT_TRANSPORT_PATTERN and
// classifyText) with word
// boundaries, plus the transport errors of Go's net/http, crypto/tls and
// x/net/http2, Node, Envoy and Bedrock.
var transientRE = match.WordPhrases(
	// overloaded / provider-returned-error
	`overloaded`,
	`provider.?returned.?error`,
	`provider (?:returned error finish_reason|finish_reason:\s*error)`,
	// rate limit / too many requests (usage limits are told apart separately)
	`rate.?limit`,
	`too many (?:concurrent )?requests`,
	`throttl(?:e|ed|es|ing)`,
	`(?:requests?|tokens?) per (?:minute|second|min|sec)`,
	// service unavailable / server / internal error
	`service.?unavailable`,
	`(?:temporarily|currently) (?:unavailable|overloaded)`,
	`server.?error`,
	`server had an error`,
	`internal.?error`,
	`internal server`,
	`bad gateway`,
	`no healthy upstream`,
	`model (?:is )?not ready`,
	`model stream error`,
	`capacity (?:exceeded|constraints?)`,
	`(?:at|over|insufficient) capacity`,
	// provider-suggested retry wording
	`retry your request`,
	`try again later`,
	`please retry`,
	`wait before (?:trying|retrying)`,
	// network / connection / socket
	`network.?error`,
	`connection.?error`,
	`connection.?refused`,
	`connection.?reset`,
	`connection (?:was |has been )?(?:closed|lost|aborted|dropped|terminated)`,
	`closed network connection`,
	`server closed idle connection`,
	`broken pipe`,
	`(?:network|host) is (?:unreachable|down)`,
	`no route to host`,
	`other side closed`,
	`fetch failed`,
	`upstream.?connect`,
	`upstream.?request.?failed`,
	`reset before headers`,
	`socket hang.?up`,
	`(?:the\s+)?socket connection (?:was )?closed unexpectedly`,
	`unexpected(?:ly)? socket clos`,
	`socket (?:closed|error)`,
	`econn(?:reset|refused|aborted)`,
	`epipe`,
	`ehostunreach`,
	`enetunreach`,
	`enetdown`,
	`eai_again`,
	`und_err_socket`,
	`temporary failure in name resolution`,
	`server misbehaving`,
	`unexpected eof`,
	`eof(?:[^a-z0-9]|$)`,
	`bad record mac`,
	// timeouts
	`timed?\s*out`,
	`etimedout`,
	`deadline.?exceeded`,
	`stream stall`,
	// terminated, retry delay, stream errors
	`terminated`,
	`retry.?delay`,
	`no error details in response`,
	`stream[_ -]?read[_ -]?error`,
	`http2 ?(?:stream ?reset|refused ?stream|enhance ?your ?calm)`,
	`refused.?stream`,
	`enhance.?your.?calm`,
	`goaway`,
	`client connection lost`,
	`malformed.?function.?call`,
)

// anthropicEnvelopeRE and beforeMessageStartRE together: an Anthropic stream
// envelope failure before message_start (transient; one "before terminal stop
// signal" is not).
var (
	anthropicEnvelopeRE  = match.Compile(`anthropic stream envelope error:`)
	beforeMessageStartRE = match.Compile(`before message_start`)
)

// usageRE: usage-limit wordings (docs/retry-policy.md §1.8, plus billing
// and daily-quota wordings). A usage limit rotates credentials instead of
// backing off.
var usageRE = match.WordPhrases(
	`usage.?limit`,
	`usage_not_included`,
	`limit_reached`,
	`quota.?exceeded`,
	`quota.?reached`,
	`resource.?exhausted`,
	`exhausted your capacity`,
	`quota will reset`,
	`insufficient.?(?:balance|quota|credits?|funds)`,
	`exceeded your (?:current )?quota`,
	`spend(?:ing)?.?limit`,
	`credit.?balance`,
	`out of credits`,
	`requires more credits`,
	`billing.?(?:hard.?limit|not.?active)`,
	`payment required`,
	`per.?day`,
	`daily (?:limit|quota)`,
)

// The reference's account-rate-limit pattern is
//
//	\baccount(?:'s)?\b[^\n]{0,80}\brate.?limit\b|\brate.?limit\b[^\n]{0,80}\baccount\b
//
// an account-level rate limit is a usage limit. As a regexp its bounded
// repetition and leading \b make Go's matcher walk every position (tens of
// µs per message); accountNearRateLimit finds the two words with
// strings.Index and checks the boundaries and the distance itself. \b as
// the reference (so "account/rate-limits" in an OpenAI URL does not match).
func accountNearRateLimit(w string) bool {
	accounts := wordSpans(w, "account", func(end int) int {
		if strings.HasPrefix(w[end:], "'s") && match.Boundary(w, end+2) {
			return end + 2
		}
		return end
	})
	if accounts == nil {
		return false
	}
	var limits [][2]int
	for off := 0; ; {
		k := strings.Index(w[off:], "limit")
		if k < 0 {
			break
		}
		at := off + k
		off = at + 1
		if !match.Boundary(w, at+len("limit")) {
			continue
		}
		// "rate" right before, or with one character (not a newline) between.
		for _, gap := range []int{0, 1} {
			start := at - gap - len("rate")
			if start < 0 || w[start:start+4] != "rate" || (gap == 1 && w[at-1] == '\n') {
				continue
			}
			if match.Boundary(w, start) {
				limits = append(limits, [2]int{start, at + len("limit")})
				break
			}
		}
	}
	within := func(from, to int) bool {
		return from <= to && to-from <= 80 && !strings.Contains(w[from:to], "\n")
	}
	for _, a := range accounts {
		for _, r := range limits {
			if within(a[1], r[0]) || within(r[1], a[0]) {
				return true
			}
		}
	}
	return false
}

// wordSpans returns the spans of word in s that start at an ASCII word
// boundary and, after extend (which may take a suffix), end at one.
func wordSpans(s, word string, extend func(end int) int) [][2]int {
	var spans [][2]int
	for off := 0; ; {
		k := strings.Index(s[off:], word)
		if k < 0 {
			return spans
		}
		at := off + k
		off = at + 1
		end := at + len(word)
		if !match.Boundary(s, at) {
			continue
		}
		if e := extend(end); e != end {
			spans = append(spans, [2]int{at, e})
			continue
		}
		if match.Boundary(s, end) {
			spans = append(spans, [2]int{at, end})
		}
	}
}

// perMinuteRE: explicit per-minute/per-second wording. It keeps the account
// pattern from turning ordinary throttling into a usage limit.
var perMinuteRE = match.AnyPhrases(`per.?min(?:ute)?\b`, `\b(?:tpm|rpm)\b`, `per.?second`)

// Rate-limit reason match.Phrases (reference parseRateLimitReason), used for the
// usage-limit window estimate and the fallback cooldown.
var (
	reasonQuotaFirstRE = match.AnyPhrases(`quota will reset`, `exhausted your capacity`)
	reasonCapacityRE   = match.AnyPhrases(`capacity`, `overloaded`, `resource exhausted`)
	reasonPerDayRE     = match.AnyPhrases(`per.?day`, `daily (?:limit|quota)`)
	reasonRateRE       = match.AnyPhrases(`per minute`, `rate.?limit`, `too many requests`, `presque`)
	reasonQuotaRE      = match.AnyPhrases(`exhausted`, `quota`, `usage limit`, `insufficient.?balance`)
	reasonServerRE     = match.AnyPhrases(`internal error`, `internal server error`)
)
