package credstore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// sealer seals secrets before they are written to Redis: AES-GCM with the
// configured key, the credential's provider, ID and owner (a tenant's own
// credential) as additional data (a sealed secret cannot be moved to
// another credential, nor to another owner). Without a key,
// secrets are stored in clear. Stored forms: "p1:<secret>" (clear) and
// "g1:<base64 nonce|ciphertext>" (sealed).
type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) == 0 {
		return &sealer{}, nil
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("credstore: secret key: must be 16, 24 or 32 bytes, got %d", len(key))
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("credstore: secret key: %w", err)
	}
	return &sealer{aead: aead}, nil
}

// aad is a server credential's provider and ID, and a tenant's own one's
// owner after those (IDs and owners have no control characters).
func aad(providerName, owner, id string) []byte {
	if owner == "" {
		return []byte(providerName + "\x00" + id)
	}
	return []byte(providerName + "\x00" + id + "\x00" + owner)
}

func (s *sealer) seal(providerName, owner, id, secret string) (string, error) {
	if s.aead == nil {
		return "p1:" + secret, nil
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("credstore: sealing a secret: %w", err)
	}
	out := s.aead.Seal(nonce, nonce, []byte(secret), aad(providerName, owner, id))
	return "g1:" + base64.RawStdEncoding.EncodeToString(out), nil
}

var errSealed = errors.New("secret cannot be opened (is the store's secret key the same on every replica?)")

func (s *sealer) open(providerName, owner, id, stored string) (string, error) {
	switch {
	case strings.HasPrefix(stored, "p1:"):
		return stored[3:], nil
	case strings.HasPrefix(stored, "g1:") && s.aead != nil:
		raw, err := base64.RawStdEncoding.DecodeString(stored[3:])
		if err != nil || len(raw) < s.aead.NonceSize() {
			break
		}
		n := s.aead.NonceSize()
		plain, err := s.aead.Open(nil, raw[:n], raw[n:], aad(providerName, owner, id))
		if err != nil {
			break
		}
		return string(plain), nil
	}
	return "", fmt.Errorf("credstore: credential %s: %w", id, errSealed)
}
