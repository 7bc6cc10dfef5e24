package oauth

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/oauth2"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// One fetch serves every concurrent caller; a failed fetch is not cached;
// Invalidate drops only the token it names.
func TestSourceCachesAndInvalidates(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewCache(Options{Now: func() time.Time { return now }})
	var fetches atomic.Int32
	var fail atomic.Bool
	src, err := c.Source("secret", func() (Fetch, any, error) {
		return func(ctx context.Context) (*oauth2.Token, error) {
			if _, ok := ctx.Value(oauth2.HTTPClient).(*http.Client); !ok {
				t.Error("the fetch's context carries no HTTP client")
			}
			if fail.Load() {
				return nil, errors.New("boom")
			}
			n := fetches.Add(1)
			return &oauth2.Token{AccessToken: "t" + string(rune('0'+n)), Expiry: now.Add(time.Hour)}, nil
		}, "value", nil
	})
	if err != nil || src.Value != "value" {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if tok, err := src.Token(t.Context()); err != nil || tok.AccessToken != "t1" {
				t.Errorf("token %v, %v", tok, err)
			}
		})
	}
	wg.Wait()
	if again, _ := c.Source("secret", nil); again != src || fetches.Load() != 1 {
		t.Fatalf("fetches %d, same source %v", fetches.Load(), again == src)
	}
	src.Invalidate("other")
	if tok, _ := src.Token(t.Context()); tok.AccessToken != "t1" {
		t.Fatalf("token %s after invalidating another", tok.AccessToken)
	}
	src.Invalidate("t1")
	fail.Store(true)
	if _, err := src.Token(t.Context()); err == nil {
		t.Fatal("no error from a failing fetch")
	}
	fail.Store(false)
	if tok, _ := src.Token(t.Context()); tok.AccessToken != "t2" || fetches.Load() != 2 {
		t.Fatalf("token %s, %d fetches", tok.AccessToken, fetches.Load())
	}
	if _, err := c.Source("bad", func() (Fetch, any, error) { return nil, nil, errors.New("malformed") }); err == nil {
		t.Fatal("no error from newFetch")
	}
}

// A caller waiting for another's fetch gives up when its context ends.
func TestSourceWaitEndsWithContext(t *testing.T) {
	c := NewCache(Options{})
	entered, release := make(chan struct{}), make(chan struct{})
	src, _ := c.Source("", func() (Fetch, any, error) {
		return func(ctx context.Context) (*oauth2.Token, error) {
			close(entered)
			<-release
			return &oauth2.Token{AccessToken: "t"}, nil
		}, nil, nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = src.Token(context.Background())
	}()
	<-entered
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := src.Token(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	close(release)
	<-done
}
