package server

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentd/agentd/internal/server/convert"
)

// The HTTP face's guards, in the order they run on every request:
//
//   - local mode (no auth.tokens) only: the Host must be a loopback name or
//     address, or one of http.allowed_hosts (no DNS rebinding: a page on
//     attacker.example resolving to 127.0.0.1 is refused);
//   - local mode only: a state-changing request (POST, PUT, PATCH, DELETE)
//     that a browser sends from a foreign origin — an Origin that is neither
//     this server's own nor one of http.cors.allowed_origins, or a
//     cross-site Sec-Fetch-Site — is refused, and so is one a browser sends
//     with a CORS-simple content type (text/plain, a form), which a page
//     can send without a preflight. Clients that are not browsers send
//     neither header and are not affected;
//   - with auth.tokens, the API's bearer token is checked before anything
//     of the body is read (webAPI.route);
//   - a request body is read whole, at most limits.max_request_bytes (413)
//     and within limits.body_timeout_ms (408), before it is parsed.

// hostGuard refuses, in local mode, requests for a Host that is not this
// machine's, and cross-site state-changing requests from browsers.
type hostGuard struct {
	next    http.Handler
	hosts   map[string]bool // allowed host names besides loopback ones, lower case
	origins map[string]bool // http.cors.allowed_origins
	any     bool            // "*" among them
}

func newHostGuard(next http.Handler, allowedHosts, allowedOrigins []string) *hostGuard {
	g := &hostGuard{next: next, hosts: map[string]bool{}, origins: map[string]bool{}}
	for _, h := range allowedHosts {
		g.hosts[strings.ToLower(h)] = true
	}
	for _, o := range allowedOrigins {
		g.any = g.any || o == "*"
		g.origins[o] = true
	}
	return g
}

func (g *hostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Host != "" && !g.hostAllowed(r.Host) {
		writeStatus(w, http.StatusForbidden, status.Newf(codes.PermissionDenied,
			"Host: %q is not a loopback name or address; without auth.tokens agentd answers only requests for this machine (add the name to http.allowed_hosts)", convert.Clip(r.Host)))
		return
	}
	if stateChanging(r.Method) {
		if err := g.browserRefusal(r); err != nil {
			writeStatus(w, http.StatusForbidden, err)
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// hostAllowed: localhost (and its subdomains, which resolve to loopback), a
// loopback address, or a configured name.
func (g *hostGuard) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || g.hosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func stateChanging(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// headerValue is h.Get(key) for a key written in its canonical form, as
// net/http's server keeps a request's header keys: the map's lookup alone,
// without Get's canonicalization of the key (≈ 500 instructions a call,
// several calls on every request).
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// browserRefusal is why a browser's state-changing request is refused
// (nil: it is not refused).
func (g *hostGuard) browserRefusal(r *http.Request) *status.Status {
	origin := headerValue(r.Header, "Origin")
	site := headerValue(r.Header, "Sec-Fetch-Site")
	fromBrowser := origin != "" || site != "" || headerValue(r.Header, "Sec-Fetch-Mode") != ""
	if !fromBrowser {
		return nil
	}
	switch {
	case origin != "" && !g.originAllowed(origin, r.Host):
		return status.Newf(codes.PermissionDenied,
			"Origin: %q may not change anything here; add it to http.cors.allowed_origins to allow it", convert.Clip(origin))
	case origin == "" && (site == "cross-site" || site == "same-site"):
		return status.New(codes.PermissionDenied, "Sec-Fetch-Site: a "+site+" request may not change anything here")
	}
	if ct := headerValue(r.Header, "Content-Type"); ct != "" || r.ContentLength != 0 {
		mt, _, _ := mime.ParseMediaType(ct)
		switch strings.ToLower(mt) {
		case "", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data":
			return status.Newf(codes.PermissionDenied,
				"Content-Type: %q is not accepted from a browser (any page can send it without asking); send application/json", convert.Clip(ct))
		}
	}
	return nil
}

// originAllowed: this server's own origin (the console), or a configured one.
func (g *hostGuard) originAllowed(origin, host string) bool {
	o := strings.ToLower(origin)
	if g.any || g.origins[o] {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, host)
}

// readBody reads r's body whole within the request limits and gives r a
// copy, so that nothing downstream reads from the connection. It reports
// false when it has answered (413, 408, 400).
func (a *webAPI) readBody(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return r, true
	}
	if r.ContentLength > a.maxBody {
		a.tooLarge(w)
		return r, false
	}
	rc := http.NewResponseController(w)
	if a.bodyTimeout > 0 {
		_ = rc.SetReadDeadline(time.Now().Add(a.bodyTimeout))
	}
	size := 512
	if r.ContentLength > 0 {
		size = int(r.ContentLength) + 1 // one more: io.ReadAll then sees EOF without growing
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, a.maxBody))
	if a.bodyTimeout > 0 {
		_ = rc.SetReadDeadline(time.Time{})
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		a.tooLarge(w)
		return r, false
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		writeStatus(w, http.StatusRequestTimeout, status.Newf(codes.DeadlineExceeded,
			"request body: not received within limits.body_timeout_ms (%d ms)", a.bodyTimeout.Milliseconds()))
		return r, false
	case err != nil:
		writeStatus(w, http.StatusBadRequest, status.Newf(codes.InvalidArgument, "request body: %v", err))
		return r, false
	}
	b := fixLoneSurrogates(buf.Bytes()) // surrogates.go
	r.Body = &readBytes{Reader: bytes.NewReader(b), b: b}
	r.ContentLength = int64(len(b))
	return r, true
}

func (a *webAPI) tooLarge(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	writeStatus(w, http.StatusRequestEntityTooLarge, status.Newf(codes.ResourceExhausted,
		"request body: larger than limits.max_request_bytes (%d bytes)", a.maxBody))
}

// errorJSON encodes errors as the gateway's marshaler does (details: [] included).
var errorJSON = &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{EmitDefaultValues: true}}

// writeStatus answers with st as the gateway writes errors
// ({"code", "message", "details"}) under the HTTP status code.
func writeStatus(w http.ResponseWriter, code int, st *status.Status) {
	body, err := errorJSON.Marshal(st.Proto())
	if err != nil {
		body = []byte(fmt.Sprintf(`{"code":%d,"message":"internal error","details":[]}`, codes.Internal))
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
