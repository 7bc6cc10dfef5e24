package wire

import (
	"encoding/base64"
	"regexp"
	"strings"
)

const redacted = "[REDACTED]"

var (
	// keyLikeRE: key-shaped tokens (sk-…, sk-ant-…, sk-proj-…, rk-/pk-…),
	// bearer tokens and masked echoes such as "sk-abc12****wxyz".
	keyLikeRE = regexp.MustCompile(`\b(?:sk|rk|pk)-[A-Za-z0-9_\-*]{6,}|(?i:\bbearer\s+)[A-Za-z0-9_\-.~+/*]{8,}=*|[A-Za-z0-9_\-]*\*{4,}[A-Za-z0-9_\-*]*`)
	bearerRE  = regexp.MustCompile(`(?i)^bearer\s+`)
	tokenRE   = regexp.MustCompile(`[A-Za-z0-9_\-]{8,}`)
	// base64RE: a run that may be base64 (standard or URL alphabet) of 12
	// characters or more, enough to carry 8 bytes.
	base64RE = regexp.MustCompile(`[A-Za-z0-9+/_\-]{12,}={0,2}`)
)

// base64Encodings are the alphabets a secret may be echoed in (an
// Authorization: Basic header, a provider quoting a header back); padding
// is trimmed before decoding.
var base64Encodings = []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding}

// redact removes secrets from a text a provider or a transport wrote: every
// occurrence of a secret (of 8 bytes or more), every token of 8 or more
// key characters that is part of a secret (a provider echoing a key's
// prefix or suffix), and key-shaped tokens whoever they belong to.
//
// A base64 text that decodes to bytes holding a secret is redacted too, at
// whatever offset the secret sits in what was encoded ("user:key").
func redact(s string, secrets ...string) string {
	s = redactBase64(s, secrets)
	for _, sec := range secrets {
		if len(sec) >= 8 {
			s = strings.ReplaceAll(s, sec, redacted)
		}
	}
	s = keyLikeRE.ReplaceAllStringFunc(s, func(m string) string {
		if b := bearerRE.FindString(m); b != "" {
			return b + redacted
		}
		return redacted
	})
	return tokenRE.ReplaceAllStringFunc(s, func(tok string) string {
		for _, sec := range secrets {
			if len(sec) >= 8 && strings.Contains(sec, tok) {
				return redacted
			}
		}
		return tok
	})
}

// redactBase64 replaces every base64 run of s that decodes to bytes which
// contain one of secrets (8 bytes or more).
func redactBase64(s string, secrets []string) string {
	long := false
	for _, sec := range secrets {
		long = long || len(sec) >= 8
	}
	if !long {
		return s
	}
	return base64RE.ReplaceAllStringFunc(s, func(run string) string {
		body := strings.TrimRight(run, "=")
		if len(body)%4 == 1 {
			body = body[:len(body)-1] // a stray last character carries no byte
		}
		for _, enc := range base64Encodings {
			dec, err := enc.DecodeString(body)
			if err != nil {
				continue
			}
			for _, sec := range secrets {
				if len(sec) >= 8 && strings.Contains(string(dec), sec) {
					return redacted
				}
			}
		}
		return run
	})
}
