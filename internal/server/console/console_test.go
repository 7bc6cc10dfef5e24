package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Every file is served with its type and the page's headers; a name that is
// not one of them is not found.
func TestHandler(t *testing.T) {
	h := Handler()
	for path, ctype := range map[string]string{
		"/":          "text/html",
		"/app.js":    "text/javascript",
		"/api.js":    "text/javascript",
		"/style.css": "text/css",
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), ctype) || w.Body.Len() == 0 {
			t.Fatalf("%s = %d %q", path, w.Code, w.Header().Get("Content-Type"))
		}
		for k, want := range map[string]string{"Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"} {
			if got := w.Header().Get(k); got != want {
				t.Fatalf("%s: %s = %q, want %q", path, k, got, want)
			}
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Fatalf("%s: Content-Security-Policy %q", path, csp)
		}
	}
	for _, path := range []string{"/nope.js", "/console.go"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != http.StatusNotFound {
			t.Fatalf("%s = %d, want 404", path, w.Code)
		}
	}
}
