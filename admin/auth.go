package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// SetToken sets the token the admin listener asks for ("" asks for none,
// the default): every request but /live and /ready (an orchestrator's
// probes) must carry it, as a bearer token (Authorization: Bearer TOKEN,
// for scripts and Prometheus) or as the password of HTTP basic
// authentication with any user name (for a browser opening the status
// page, which then asks for it). Others get 401. It may be called at any
// time (a reload does).
func (a *Server) SetToken(token string) {
	if token == "" {
		a.token.Store(nil)
		return
	}
	sum := sha256.Sum256([]byte(token))
	a.token.Store(&sum)
}

// guard lets through to h the requests that carry the token, and
// cross-origin requests that change nothing: a page elsewhere cannot have
// a browser that holds the status page's credentials drain a server
// (http.CrossOriginProtection refuses its POST).
func (a *Server) guard(h http.Handler) http.Handler {
	h = http.NewCrossOriginProtection().Handler(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := a.token.Load()
		if want == nil || r.URL.Path == "/live" || r.URL.Path == "/ready" || carries(r, want) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="sluice admin", charset="UTF-8"`)
		writeError(w, http.StatusUnauthorized, "the admin listener asks for its token (admin.token_file): as a bearer token, or as the password of basic authentication")
	})
}

// carries reports whether r carries the token whose digest is want.
func carries(r *http.Request, want *[32]byte) bool {
	var got string
	if _, pass, ok := r.BasicAuth(); ok {
		got = pass
	} else if auth := r.Header.Get("Authorization"); len(auth) > len("Bearer ") && strings.EqualFold(auth[:len("Bearer ")], "Bearer ") {
		got = auth[len("Bearer "):]
	} else {
		return false
	}
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}
