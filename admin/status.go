package admin

import (
	"embed"
	"io/fs"
	"net/http"
)

// static holds the status page and its script and style sheet: the page
// needs nothing from the internet, and no framework.
//
//go:embed static
var static embed.FS

// statusPage serves the status page; its script fetches /api/upstreams
// every second and redraws.
func (a *Server) statusPage(w http.ResponseWriter, r *http.Request) {
	page, err := static.ReadFile("static/status.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page loads nothing but its own assets, and is never framed.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	w.Write(page)
}

// assets serves the page's script and style sheet under /status/.
func (a *Server) assets() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil { // cannot happen: the embedded tree is fixed at build time
		return http.NotFoundHandler()
	}
	return http.StripPrefix("/status/", http.FileServerFS(sub))
}
