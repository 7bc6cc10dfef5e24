package session

import (
	"regexp"
	"sync"
	"testing"
)

// IDs come from the buffered random source: many at once, from many
// goroutines, each well formed and none twice (the buffer refills and
// never hands a byte out twice).
func TestNewIDsAreUniqueAcrossRefills(t *testing.T) {
	form := regexp.MustCompile(`^prm_[a-z2-7]{26}$`)
	const workers, each = 8, 200 // 1600 IDs: 50 refills of the buffer
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				ids[w] = append(ids[w], newID("prm_"))
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, list := range ids {
		for _, id := range list {
			if !form.MatchString(id) {
				t.Fatalf("id %q is not prm_ and 26 base32 characters", id)
			}
			if seen[id] {
				t.Fatalf("id %q made twice", id)
			}
			seen[id] = true
		}
	}
}

func TestRandBufferNeverRepeatsItsBytes(t *testing.T) {
	var r randBuffer
	var prev [16]byte
	for i := range 100 {
		var b [16]byte
		r.read(b[:])
		if b == ([16]byte{}) || (i > 0 && b == prev) {
			t.Fatalf("read %d: %x after %x", i, b, prev)
		}
		prev = b
	}
}

func TestIsSessionIDIsTheIDForm(t *testing.T) {
	form := regexp.MustCompile(`^ses_[a-z2-7]{26}$`)
	for _, id := range []string{
		newID("ses_"), newID("prm_"), "", "ses_", "ses_" + "a234567abcdefghijklmnopqrs",
		"ses_" + "a234567abcdefghijklmnopqr", "ses_" + "a234567abcdefghijklmnopqrst", "ses_" + "A234567abcdefghijklmnopqrs",
		"ses_" + "0234567abcdefghijklmnopqrs", "ses_" + "8234567abcdefghijklmnopqrs", "ses_" + "a234567abcdefghijklmnopq\u00e9",
		"SES_" + "a234567abcdefghijklmnopqrs", "xses_" + "a234567abcdefghijklmnopqr",
	} {
		if got, want := isSessionID(id), form.MatchString(id); got != want {
			t.Errorf("isSessionID(%q) = %v, the form says %v", id, got, want)
		}
	}
}
