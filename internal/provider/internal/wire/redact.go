package wire

import (
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
)

// redact removes secrets from a text a provider or a transport wrote: every
// occurrence of a secret (of 8 bytes or more), every token of 8 or more
// key characters that is part of a secret (a provider echoing a key's
// prefix or suffix), and key-shaped tokens whoever they belong to.
func redact(s string, secrets ...string) string {
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
