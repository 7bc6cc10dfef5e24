// Package console is agentd's web console: its static files (a page, its
// scripts and style), embedded in the binary, and the handler that serves
// them with the headers the page needs. Package server mounts it at
// /console/.
package console

import (
	"embed"
	"net/http"
)

//go:embed *.html *.js *.css
var files embed.FS

// Handler serves the console's files, by their names (the mount's prefix
// stripped): "/" is the page. Every answer forbids what the page does not
// do (no other origin's scripts, styles or connections, no framing, no
// referrer) and is revalidated on each load.
func Handler() http.Handler {
	fs := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-cache")
		fs.ServeHTTP(w, r)
	})
}
