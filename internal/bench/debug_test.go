package bench

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A recording starts writing to the response, and stops when the client
// goes (here: before the handler runs); a recording that cannot start
// (one is already running) is a 409.
func TestRecording(t *testing.T) {
	var started, stopped int
	h := recording(func(w io.Writer) error {
		started++
		_, err := w.Write([]byte("data"))
		return err
	}, func() { stopped++ })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/debug/pprof/trace?seconds=60", nil))
	if started != 1 || stopped != 1 || rec.Body.String() != "data" || rec.Header().Get("Content-Type") != "application/octet-stream" {
		t.Errorf("started %d, stopped %d, body %q, type %q", started, stopped, rec.Body.String(), rec.Header().Get("Content-Type"))
	}

	busy := recording(func(io.Writer) error { return errors.New("already running") }, func() { t.Error("stopped a recording that did not start") })
	rec = httptest.NewRecorder()
	busy(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/profile", nil))
	if rec.Code != http.StatusConflict {
		t.Errorf("busy: %d, want 409", rec.Code)
	}
}
