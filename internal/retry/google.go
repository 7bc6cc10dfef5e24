package retry

import (
	"encoding/json"
	"strings"
	"time"
)

// Google (Gemini API) error bodies carry their structured hints in
// error.details, a list of google.rpc messages (docs/provider-formats.md):
//
//   - google.rpc.RetryInfo {"retryDelay": "45.837906927s"}: the wait, as
//     a google.protobuf.Duration's JSON (seconds with up to nine decimals
//     and an "s");
//   - google.rpc.QuotaFailure {"violations": [{"quotaId":
//     "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "quotaMetric":
//     "generativelanguage.googleapis.com/generate_content_free_tier_requests",
//     …}]}: which quota ran out. A per-day quota does not come back
//     before its reset, at midnight Pacific time (as Google documents for
//     the Gemini API's daily limits); a per-minute one does within the
//     minute.

// googleFacts is what a Google error body says.
type googleFacts struct {
	delay    time.Duration // RetryInfo.retryDelay
	hasDelay bool
	perDay   string // the first per-day quota violated, "" for none
	perMin   string // the first per-minute quota violated, "" for none
}

// maxGoogleBody bounds the body parsed for google.rpc details.
const maxGoogleBody = 64 << 10

// parseGoogleBody reads the google.rpc details of an error body: the
// envelope {"error": {…, "details": [...]}}, a one-element array of it
// (some proxies), or a bare error object. Anything else says nothing.
func parseGoogleBody(body string) googleFacts {
	var g googleFacts
	body = strings.TrimSpace(body)
	if len(body) > maxGoogleBody || !strings.Contains(body, "type.googleapis.com/google.rpc.") {
		return g
	}
	type detail struct {
		Type       string `json:"@type"`
		RetryDelay string `json:"retryDelay"`
		Violations []struct {
			QuotaID     string `json:"quotaId"`
			QuotaMetric string `json:"quotaMetric"`
		} `json:"violations"`
	}
	type errObj struct {
		Details []detail `json:"details"`
	}
	var env struct {
		Error   *errObj  `json:"error"`
		Details []detail `json:"details"`
	}
	raw := []byte(body)
	if raw[0] == '[' {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
			return g
		}
		raw = list[0]
	}
	if json.Unmarshal(raw, &env) != nil {
		return g
	}
	details := env.Details
	if env.Error != nil {
		details = env.Error.Details
	}
	for _, d := range details {
		switch {
		case strings.HasSuffix(d.Type, "google.rpc.RetryInfo"):
			if v, ok := parseProtoDuration(d.RetryDelay); ok && !g.hasDelay {
				g.delay, g.hasDelay = v, true
			}
		case strings.HasSuffix(d.Type, "google.rpc.QuotaFailure"):
			for _, v := range d.Violations {
				name := v.QuotaID
				if name == "" {
					name = v.QuotaMetric
				}
				switch id := strings.ToLower(v.QuotaID + " " + v.QuotaMetric); {
				case strings.Contains(id, "perday") || strings.Contains(id, "per_day"):
					if g.perDay == "" {
						g.perDay = name
					}
				case strings.Contains(id, "perminute") || strings.Contains(id, "per_minute"):
					if g.perMin == "" {
						g.perMin = name
					}
				}
			}
		}
	}
	return g
}

// parseProtoDuration parses a google.protobuf.Duration's JSON form:
// "45.837906927s", "26s", "0.5s". At most a day is accepted (longer is not
// a retry delay).
func parseProtoDuration(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasSuffix(s, "s") || len(s) < 2 || len(s) > 24 || strings.ContainsAny(s, "+-eE") {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > 24*time.Hour {
		return 0, false
	}
	return d, true
}

// google decides a Gemini RESOURCE_EXHAUSTED (or any failure whose body
// names a quota): a per-day quota is a usage limit until the quota's reset
// (the hint, see untilPacificMidnight); a per-minute quota, or a
// RetryInfo without a per-day quota, is transient throttling (retried at
// the hinted delay); Vertex's "Resource exhausted. Please try again later"
// (shared capacity, no quota of the caller's) is transient too. Anything
// else is left to the other families (a bare "You exceeded your current
// quota" stays a usage limit).
func (c *facts) google(g googleFacts) (Class, string, bool) {
	exhausted := c.typ == "resource_exhausted" || c.code == "resource_exhausted" || c.status == 429 || c.textStatus == 429 ||
		strings.Contains(c.lower, "resource_exhausted")
	if g.perDay == "" && g.perMin == "" && exhausted {
		// The quota named in the wording ("Quota exceeded for
		// aiplatform.googleapis.com/generate_content_requests_per_minute_…",
		// "Quota exceeded for metric: …, limit: 50, model: …" does not say).
		switch {
		case strings.Contains(c.lower, "googleapis.com/") && (strings.Contains(c.lower, "per_day") || strings.Contains(c.lower, "perday")):
			g.perDay = "per-day quota named in the message"
		case strings.Contains(c.lower, "googleapis.com/") && (strings.Contains(c.lower, "per_minute") || strings.Contains(c.lower, "perminute")):
			g.perMin = "per-minute quota named in the message"
		}
	}
	switch {
	case g.perDay != "":
		return ClassUsageLimit, "per-day quota " + quote(g.perDay) + " exhausted (google.rpc.QuotaFailure): blocked until the quota resets at midnight Pacific", true
	case !exhausted:
		return "", "", false
	case g.perMin != "":
		return ClassTransient, "per-minute quota " + quote(g.perMin) + " (google.rpc.QuotaFailure): throttling, retried after the hint", true
	case g.hasDelay:
		return ClassTransient, "RESOURCE_EXHAUSTED with google.rpc.RetryInfo " + g.delay.String() + ": throttling, retried after the hint", true
	case strings.Contains(c.lower, "resource exhausted. please try again later"):
		return ClassTransient, "RESOURCE_EXHAUSTED without a quota of the caller's (shared capacity): transient", true
	}
	return "", "", false
}

// untilPacificMidnight is how long from now until the next midnight in
// US Pacific time (America/Los_Angeles: UTC-8, UTC-7 from the second Sunday
// of March 02:00 to the first Sunday of November 02:00), computed without
// a time-zone database so that the package stays free of I/O.
func untilPacificMidnight(now time.Time) time.Duration {
	now = now.UTC()
	off := pacificOffset(now)
	local := now.Add(off)
	next := time.Date(local.Year(), local.Month(), local.Day()+1, 0, 0, 0, 0, time.UTC)
	// next is local midnight written as UTC: the instant is next - offset,
	// the offset being the one in force then.
	at := next.Add(-pacificOffset(next.Add(-off)))
	return at.Sub(now)
}

// pacificOffset is US Pacific time's offset from UTC at t.
func pacificOffset(t time.Time) time.Duration {
	y := t.UTC().Year()
	start := nthSunday(y, time.March, 2).Add(10 * time.Hour) // 02:00 PST
	end := nthSunday(y, time.November, 1).Add(9 * time.Hour) // 02:00 PDT
	if !t.Before(start) && t.Before(end) {
		return -7 * time.Hour
	}
	return -8 * time.Hour
}

// nthSunday is 00:00 UTC of the n-th Sunday of a month.
func nthSunday(year int, month time.Month, n int) time.Time {
	d := time.Date(year, month, 1, 0, 0, 0, 0, time.UTC)
	shift := (7 - int(d.Weekday())) % 7
	return d.AddDate(0, 0, shift+7*(n-1))
}

// creditsExhausted recognises OpenRouter's 402: the account has no credits
// for the request. It is neither retried (no wait brings credits back) nor
// a usage-limit block (the credential is not limited until a time; a
// person must buy credits or lower max_tokens).
func (c *facts) creditsExhausted() (string, bool) {
	if c.status != 0 && c.status != 200 && c.status != 402 && c.textStatus != 402 {
		return "", false // another status: its own family decides
	}
	for _, w := range openRouterCredits {
		if strings.Contains(c.lower, w) {
			return "text matches " + quote(w) + ": out of credits (OpenRouter); not retried and not a usage-limit block", true
		}
	}
	return "", false
}

// openRouterCredits are OpenRouter's 402 wordings.
var openRouterCredits = []string{
	"insufficient credits",
	"requires more credits",
	"never purchased credits",
	"can only afford",
}

// localServer recognises the transient wordings of local OpenAI-compatible
// servers (vLLM, sglang, Ollama, TGI and Hugging Face endpoints): a model
// still loading, a server that is busy or whose queue is full. They may
// come inside a 200 (an SSE data: frame) or with a status the other
// families do not retry.
func (c *facts) localServer() (string, bool) {
	for _, w := range localServerTransient {
		if strings.Contains(c.lower, w) {
			return "text matches " + quote(w) + " (a local server loading or busy)", true
		}
	}
	return "", false
}

var localServerTransient = []string{
	"loading model",
	"model is loading",
	"model is currently loading",
	"is currently loading",
	"server busy, please try again",
	"maximum pending requests exceeded",
	"the server is overloaded",
	"server is overloaded",
	"engine is overloaded",
	"too many pending requests",
}
