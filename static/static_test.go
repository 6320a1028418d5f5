package static

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/route"
)

// site is the directory tree the tests serve, beside a secret outside it.
type site struct {
	dir, root string
	mod       time.Time
	css, big  []byte
	cssGz     []byte
}

func makeSite(t *testing.T) *site {
	t.Helper()
	st := &site{dir: t.TempDir()}
	st.root = filepath.Join(st.dir, "root")
	st.css = []byte("body { color: black }\n")
	st.big = bytes.Repeat([]byte("0123456789abcdef"), 1<<17) // 2 MiB
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(st.css)
	w.Close()
	st.cssGz = gz.Bytes()
	files := map[string][]byte{
		"../secret.txt":            []byte("secret"),
		"../root-sibling/x.txt":    []byte("outside"),
		"index.html":               []byte("<h1>home</h1>"),
		"css/site.css":             st.css,
		"css/site.css.gz":          st.cssGz,
		"css/site.css.br":          []byte("brotli bytes"),
		"js/app.js":                []byte("let a = 1;"),
		"js/app.js.gz":             st.cssGz,
		"img/logo.svg":             []byte("<svg/>"),
		"font/a.woff2":             []byte("wOF2"),
		"data/x.json":              []byte("{}"),
		"data/blob.unknownext":     []byte("?"),
		"big.bin":                  st.big,
		"empty.txt":                nil,
		"with space.txt":           []byte("spaced"),
		"per%cent.txt":             []byte("percent"),
		"back\\slash.txt":          []byte("backslash"),
		".env":                     []byte("SECRET=1"),
		".git/config":              []byte("[core]"),
		".well-known/security.txt": []byte("Contact: x"),
		"docs/index.html":          []byte("docs"),
		"noindex/file.txt":         []byte("file"),
	}
	for name, data := range files {
		p := filepath.Join(st.root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st.mod = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for name := range files {
		os.Chtimes(filepath.Join(st.root, name), st.mod, st.mod)
	}
	links := map[string]string{
		"out.txt":    "../secret.txt",   // a file out of the root
		"outdir":     "..",              // a directory out of it
		"sib":        "../root-sibling", // a directory whose name starts like the root's
		"abs.txt":    filepath.Join(st.dir, "secret.txt"),
		"in.txt":     "css/site.css", // within the root: served
		"css/up.css": "../js/app.js", // up, and still within
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(st.root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"fifo", "noindex/fifo"} {
		if err := mkfifo(filepath.Join(st.root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// serve runs a proxy with a route serving the site under /static/, and
// one for everything else answered by a phase of its own.
func serve(t *testing.T, st *site, opts ...proxy.ListenerOptions) (addr string, access *proxytest.Buffer) {
	t.Helper()
	files, err := New(Options{Root: st.root, Prefix: "/static/", Index: "index.html", CacheControl: "max-age=60"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { files.Close() })
	tbl := route.New(
		route.Route{PathPrefix: "/static/", Name: "static", Phases: []any{files}},
		route.Route{Name: "default", Phases: []any{other{}}},
	)
	access = &proxytest.Buffer{}
	srv := &proxy.Server{Handler: tbl,
		ErrorLog:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(slog.NewTextHandler(access, nil)),
	}
	if len(opts) == 0 {
		return proxytest.Serve(t, srv), access
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeWith(ln, opts[0])
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String(), access
}

type other struct{}

func (other) RequestFilter(*proxy.Session) *proxy.Response { return proxy.Text(200, "other route") }

// exchange is one request of the table and what must come of it.
type exchange struct {
	name    string
	method  string // GET when ""
	target  string // sent as is: no client library cleans it
	header  string // extra fields, each ending in CRLF
	status  int
	body    any               // string or []byte; nil: not checked
	fields  map[string]string // "" value: the field must be absent
	note    string            // static=NOTE in the access log
	h1Only  bool              // a target HTTP/2 refuses before routing
	noRange bool
}

func exchanges(st *site) []exchange {
	lm := st.mod.Format(httpDate)
	before := st.mod.Add(-time.Hour).Format(httpDate)
	after := st.mod.Add(time.Hour).Format(httpDate)
	// The ETag of css/site.css (size 22) and of its .gz.
	cssTag := fmt.Sprintf(`"%x-%x"`, st.mod.UnixNano(), len(st.css))
	bigTag := fmt.Sprintf(`"%x-%x"`, st.mod.UnixNano(), len(st.big))
	return []exchange{
		// Plain files, their types and validators.
		{name: "css", target: "/static/css/site.css", status: 200, body: st.css, note: "hit",
			fields: map[string]string{"Content-Type": "text/css; charset=utf-8", "ETag": cssTag, "Last-Modified": lm,
				"Vary": "Accept-Encoding", "X-Content-Type-Options": "nosniff", "Accept-Ranges": "bytes",
				"Content-Length": "22", "Content-Encoding": "", "Cache-Control": "max-age=60", "Date": "*"}},
		{name: "js", target: "/static/js/app.js", status: 200, body: "let a = 1;",
			fields: map[string]string{"Content-Type": "text/javascript; charset=utf-8"}},
		{name: "svg", target: "/static/img/logo.svg", status: 200, fields: map[string]string{"Content-Type": "image/svg+xml"}},
		{name: "woff2", target: "/static/font/a.woff2", status: 200, fields: map[string]string{"Content-Type": "font/woff2"}},
		{name: "json", target: "/static/data/x.json", status: 200, fields: map[string]string{"Content-Type": "application/json"}},
		{name: "unknown type", target: "/static/data/blob.unknownext", status: 200, fields: map[string]string{"Content-Type": "application/octet-stream"}},
		{name: "large", target: "/static/big.bin", status: 200, body: st.big},
		{name: "empty", target: "/static/empty.txt", status: 200, body: "", fields: map[string]string{"Content-Length": "0"}},
		{name: "HEAD", method: "HEAD", target: "/static/big.bin", status: 200, body: "",
			fields: map[string]string{"Content-Length": fmt.Sprint(len(st.big)), "ETag": bigTag}},
		{name: "query ignored", target: "/static/css/site.css?v=3", status: 200, body: st.css},
		{name: "encoded space", target: "/static/with%20space.txt", status: 200, body: "spaced"},
		{name: "encoded percent", target: "/static/per%25cent.txt", status: 200, body: "percent"},
		{name: "encoded letters", target: "/static/css/%73ite.css", status: 200, body: st.css},
		{name: "double slash", target: "/static//css//site.css", status: 200, body: st.css},
		{name: "dot element", target: "/static/./css/./site.css", status: 200, body: st.css, h1Only: true},
		{name: "symlink within", target: "/static/in.txt", status: 200, body: st.css},
		{name: "symlink up, within", target: "/static/css/up.css", status: 200, body: "let a = 1;"},
		{name: "other route", target: "/x", status: 200, body: "other route"},

		// Directories.
		{name: "index", target: "/static/", status: 200, body: "<h1>home</h1>",
			fields: map[string]string{"Content-Type": "text/html; charset=utf-8"}},
		{name: "sub index", target: "/static/docs/", status: 200, body: "docs"},
		{name: "directory without slash", target: "/static/docs?a=1", status: 301, note: "redirect",
			fields: map[string]string{"Location": "/static/docs/?a=1"}},
		{name: "no index: no listing", target: "/static/noindex/", status: 404, note: "not_found"},
		{name: "no index, no slash", target: "/static/noindex", status: 404},
		{name: "file with a slash", target: "/static/css/site.css/", status: 404},
		{name: "missing", target: "/static/nope.css", status: 404, note: "not_found",
			fields: map[string]string{"X-Content-Type-Options": "nosniff", "Cache-Control": ""}},
		{name: "FIFO", target: "/static/fifo", status: 404},
		{name: "FIFO in a directory", target: "/static/noindex/fifo", status: 404},

		// Hidden files.
		{name: "dotfile", target: "/static/.env", status: 404},
		{name: "dot directory", target: "/static/.git/config", status: 404},
		{name: "encoded dotfile", target: "/static/%2eenv", status: 404},
		{name: "well-known", target: "/static/.well-known/security.txt", status: 200, body: "Contact: x"},

		// Escapes.
		{name: "dot-dot", target: "/static/../secret.txt", status: 400, note: "refused", h1Only: true,
			fields: map[string]string{"Proxy-Status": `sluice; error=http_request_error; details="the path names no file that can be served"`}},
		{name: "dot-dot inside", target: "/static/css/../../secret.txt", status: 400, h1Only: true},
		{name: "encoded dot-dot", target: "/static/%2e%2e/secret.txt", status: 400},
		{name: "encoded dot-dot, upper case", target: "/static/%2E%2E/secret.txt", status: 400},
		{name: "half-encoded dot-dot", target: "/static/.%2e/secret.txt", status: 400},
		{name: "encoded slash", target: "/static/..%2fsecret.txt", status: 404},
		{name: "encoded slash in a name", target: "/static/css%2fsite.css", status: 404},
		{name: "double-encoded dot-dot", target: "/static/%252e%252e/secret.txt", status: 404},
		{name: "backslash", target: "/static/..\\secret.txt", status: 404},
		{name: "encoded backslash", target: "/static/..%5csecret.txt", status: 404},
		{name: "backslash in a name", target: "/static/back%5cslash.txt", status: 404},
		{name: "NUL", target: "/static/css/site.css%00.txt", status: 400},
		{name: "control byte", target: "/static/css/site%0a.css", status: 400},
		{name: "bad escape", target: "/static/css/site%zz.css", status: 400},
		{name: "cut escape", target: "/static/css/site.css%2", status: 400},
		{name: "symlink out", target: "/static/out.txt", status: 404},
		{name: "absolute symlink out", target: "/static/abs.txt", status: 404},
		{name: "through a symlink out", target: "/static/outdir/secret.txt", status: 404},
		{name: "through a symlink to a sibling", target: "/static/sib/x.txt", status: 404},
		{name: "long element", target: "/static/" + strings.Repeat("a", 300), status: 404},
		{name: "long path", target: "/static/" + strings.Repeat("a/", 3000) + "x", status: 404},

		// Methods.
		{name: "POST", method: "POST", target: "/static/css/site.css", status: 405, note: "method",
			fields: map[string]string{"Allow": "GET, HEAD"}},
		{name: "DELETE", method: "DELETE", target: "/static/css/site.css", status: 405},
		{name: "OPTIONS", method: "OPTIONS", target: "/static/css/site.css", status: 405},

		// Conditional requests.
		{name: "If-None-Match", target: "/static/css/site.css", header: "If-None-Match: " + cssTag + "\r\n",
			status: 304, body: "", note: "not_modified",
			fields: map[string]string{"ETag": cssTag, "Content-Length": "", "Vary": "Accept-Encoding", "Cache-Control": "max-age=60", "Date": "*"}},
		{name: "If-None-Match in a list, weak", target: "/static/css/site.css", header: `If-None-Match: "x", W/` + cssTag + "\r\n", status: 304},
		{name: "If-None-Match *", target: "/static/css/site.css", header: "If-None-Match: *\r\n", status: 304},
		{name: "If-None-Match other", target: "/static/css/site.css", header: `If-None-Match: "other"` + "\r\n", status: 200},
		{name: "If-None-Match wins over If-Modified-Since", target: "/static/css/site.css",
			header: `If-None-Match: "other"` + "\r\nIf-Modified-Since: " + after + "\r\n", status: 200},
		{name: "If-Modified-Since same", target: "/static/css/site.css", header: "If-Modified-Since: " + lm + "\r\n", status: 304},
		{name: "If-Modified-Since later", target: "/static/css/site.css", header: "If-Modified-Since: " + after + "\r\n", status: 304},
		{name: "If-Modified-Since earlier", target: "/static/css/site.css", header: "If-Modified-Since: " + before + "\r\n", status: 200},
		{name: "If-Modified-Since RFC 850", target: "/static/css/site.css",
			header: "If-Modified-Since: " + st.mod.Format("Monday, 02-Jan-06 15:04:05 GMT") + "\r\n", status: 304},
		{name: "If-Modified-Since asctime", target: "/static/css/site.css",
			header: "If-Modified-Since: " + st.mod.Format("Mon Jan _2 15:04:05 2006") + "\r\n", status: 304},
		{name: "If-Modified-Since invalid", target: "/static/css/site.css", header: "If-Modified-Since: yesterday\r\n", status: 200},
		{name: "If-Match", target: "/static/css/site.css", header: "If-Match: " + cssTag + "\r\n", status: 200},
		{name: "If-Match other", target: "/static/css/site.css", header: `If-Match: "other"` + "\r\n", status: 412, note: "precondition_failed"},
		{name: "If-Match weak", target: "/static/css/site.css", header: "If-Match: W/" + cssTag + "\r\n", status: 412},
		{name: "If-Unmodified-Since earlier", target: "/static/css/site.css", header: "If-Unmodified-Since: " + before + "\r\n", status: 412},
		{name: "If-Unmodified-Since same", target: "/static/css/site.css", header: "If-Unmodified-Since: " + lm + "\r\n", status: 200},
		{name: "HEAD If-None-Match", method: "HEAD", target: "/static/css/site.css", header: "If-None-Match: " + cssTag + "\r\n", status: 304},

		// Ranges.
		{name: "range", target: "/static/big.bin", header: "Range: bytes=100-199\r\n", status: 206, body: st.big[100:200], note: "partial",
			fields: map[string]string{"Content-Range": fmt.Sprintf("bytes 100-199/%d", len(st.big)), "Content-Length": "100"}},
		{name: "range to the end", target: "/static/big.bin", header: "Range: bytes=2000000-\r\n", status: 206, body: st.big[2000000:]},
		{name: "range past the end", target: "/static/big.bin", header: "Range: bytes=2000000-9999999\r\n", status: 206, body: st.big[2000000:]},
		{name: "suffix range", target: "/static/css/site.css", header: "Range: bytes=-5\r\n", status: 206, body: st.css[len(st.css)-5:],
			fields: map[string]string{"Content-Range": "bytes 17-21/22", "Content-Encoding": ""}},
		{name: "suffix larger than the file", target: "/static/css/site.css", header: "Range: bytes=-500\r\n", status: 206, body: st.css},
		{name: "range with Accept-Encoding: the file's bytes", target: "/static/css/site.css",
			header: "Range: bytes=0-3\r\nAccept-Encoding: gzip, br\r\n", status: 206, body: st.css[:4],
			fields: map[string]string{"Content-Encoding": ""}},
		{name: "unsatisfiable", target: "/static/css/site.css", header: "Range: bytes=22-\r\n", status: 416, note: "unsatisfiable",
			fields: map[string]string{"Content-Range": "bytes */22"}},
		{name: "unsatisfiable suffix", target: "/static/css/site.css", header: "Range: bytes=-0\r\n", status: 416},
		{name: "backwards range", target: "/static/css/site.css", header: "Range: bytes=5-1\r\n", status: 416},
		{name: "empty file range", target: "/static/empty.txt", header: "Range: bytes=0-\r\n", status: 416},
		{name: "several ranges: whole", target: "/static/css/site.css", header: "Range: bytes=0-1,5-6\r\n", status: 200, body: st.css},
		{name: "other unit", target: "/static/css/site.css", header: "Range: items=0-1\r\n", status: 200, body: st.css},
		{name: "malformed range", target: "/static/css/site.css", header: "Range: bytes=a-b\r\n", status: 200, body: st.css},
		{name: "HEAD ignores Range", method: "HEAD", target: "/static/css/site.css", header: "Range: bytes=0-1\r\n", status: 200},
		{name: "If-Range tag", target: "/static/css/site.css", header: "Range: bytes=0-1\r\nIf-Range: " + cssTag + "\r\n", status: 206, body: "bo"},
		{name: "If-Range other tag", target: "/static/css/site.css", header: "Range: bytes=0-1\r\nIf-Range: \"x\"\r\n", status: 200, body: st.css},
		{name: "If-Range weak", target: "/static/css/site.css", header: "Range: bytes=0-1\r\nIf-Range: W/" + cssTag + "\r\n", status: 200},
		{name: "If-Range date", target: "/static/css/site.css", header: "Range: bytes=0-1\r\nIf-Range: " + lm + "\r\n", status: 206, body: "bo"},
		{name: "If-Range other date", target: "/static/css/site.css", header: "Range: bytes=0-1\r\nIf-Range: " + after + "\r\n", status: 200},

		// Precompressed siblings.
		{name: "gzip sibling", target: "/static/css/site.css", header: "Accept-Encoding: gzip\r\n", status: 200, body: st.cssGz, note: "gzip",
			fields: map[string]string{"Content-Encoding": "gzip", "Content-Type": "text/css; charset=utf-8", "Vary": "Accept-Encoding",
				"ETag": fmt.Sprintf(`"%x-%x-gzip"`, st.mod.UnixNano(), len(st.cssGz))}},
		{name: "br preferred", target: "/static/css/site.css", header: "Accept-Encoding: gzip, deflate, br\r\n", status: 200, body: "brotli bytes", note: "br",
			fields: map[string]string{"Content-Encoding": "br"}},
		{name: "gzip weighed higher", target: "/static/css/site.css", header: "Accept-Encoding: br;q=0.5, gzip\r\n", status: 200,
			fields: map[string]string{"Content-Encoding": "gzip"}},
		{name: "br refused", target: "/static/css/site.css", header: "Accept-Encoding: br;q=0, *\r\n", status: 200,
			fields: map[string]string{"Content-Encoding": "gzip"}},
		{name: "star", target: "/static/css/site.css", header: "Accept-Encoding: *\r\n", status: 200,
			fields: map[string]string{"Content-Encoding": "br"}},
		{name: "identity only", target: "/static/css/site.css", header: "Accept-Encoding: identity\r\n", status: 200, body: st.css,
			fields: map[string]string{"Content-Encoding": ""}},
		{name: "no br sibling: gzip", target: "/static/js/app.js", header: "Accept-Encoding: br, gzip\r\n", status: 200,
			fields: map[string]string{"Content-Encoding": "gzip", "Content-Type": "text/javascript; charset=utf-8"}},
		{name: "no sibling", target: "/static/img/logo.svg", header: "Accept-Encoding: br, gzip\r\n", status: 200, body: "<svg/>",
			fields: map[string]string{"Content-Encoding": "", "Vary": "Accept-Encoding"}},
		{name: "the .gz itself", target: "/static/css/site.css.gz", status: 200, body: st.cssGz,
			fields: map[string]string{"Content-Type": "application/gzip", "Content-Encoding": ""}},
		{name: "sibling's tag", target: "/static/css/site.css",
			header: fmt.Sprintf("Accept-Encoding: gzip\r\nIf-None-Match: \"%x-%x-gzip\"\r\n", st.mod.UnixNano(), len(st.cssGz)), status: 304},
		{name: "identity tag does not match the sibling", target: "/static/css/site.css",
			header: "Accept-Encoding: gzip\r\nIf-None-Match: " + cssTag + "\r\n", status: 200},
	}
}

func (x exchange) check(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != x.status {
		t.Fatalf("status %d, want %d (body %.100q)", resp.StatusCode, x.status, body)
	}
	switch want := x.body.(type) {
	case string:
		if string(body) != want {
			t.Errorf("body %.100q, want %.100q", body, want)
		}
	case []byte:
		if !bytes.Equal(body, want) {
			t.Errorf("body of %d bytes %.40q, want %d bytes %.40q", len(body), body, len(want), want)
		}
	}
	for name, want := range x.fields {
		got, ok := resp.Header[http.CanonicalHeaderKey(name)]
		switch {
		case want == "" && ok:
			t.Errorf("%s: %q, want none", name, got)
		case want == "*":
			if len(got) != 1 || got[0] == "" {
				t.Errorf("%s: %q, want one", name, got)
			}
		case want != "" && (len(got) != 1 || got[0] != want):
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

// TestFilesHTTP11 sends every exchange as a raw HTTP/1.1 request, the
// target as written, and checks the answer and the access log's note.
func TestFilesHTTP11(t *testing.T) {
	st := makeSite(t)
	addr, access := serve(t, st)
	sent := 0
	for _, x := range exchanges(st) {
		t.Run(x.name, func(t *testing.T) {
			method := x.method
			if method == "" {
				method = "GET"
			}
			// Each exchange logs one line, once answered: all of the
			// earlier ones are in before this one is sent.
			wait.For(t, "the earlier lines", func() bool { return strings.Count(access.String(), "\n") == sent })
			logged := sent
			sent++
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(nc, "%s %s HTTP/1.1\r\nHost: h\r\n%s\r\n", method, x.target, x.header)
			resp, err := http.ReadResponse(bufio.NewReader(nc), &http.Request{Method: method})
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			x.check(t, resp, body)
			if x.note != "" {
				// The line is written once the answer is: the last.
				wait.For(t, "the access log line", func() bool {
					return strings.Count(access.String(), "\n") > logged
				})
				lines := strings.Split(strings.TrimSpace(access.String()), "\n")
				if line := lines[len(lines)-1]; !strings.HasSuffix(line, " static="+x.note) {
					t.Errorf("access log line %q does not end with static=%s", line, x.note)
				}
			}
		})
	}
}

func lineFor(log, substr string) string {
	for l := range strings.Lines(log) {
		if strings.Contains(l, substr) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestFilesHTTP2 sends the exchanges over HTTP/2 (h2c, prior knowledge)
// and over HTTP/2 on TLS, the target as the :path as written.
func TestFilesHTTP2(t *testing.T) {
	st := makeSite(t)
	addr, _ := serve(t, st, proxy.ListenerOptions{Protocols: []string{"http/1.1", "h2c"}})
	tr := &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, x := range exchanges(st) {
		if x.h1Only {
			continue
		}
		t.Run(x.name, func(t *testing.T) {
			method := x.method
			if method == "" {
				method = "GET"
			}
			req, err := http.NewRequest(method, "http://"+addr+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.URL.Opaque = x.target // sent as the :path, unchanged
			for l := range strings.Lines(x.header) {
				name, value, _ := strings.Cut(strings.TrimSpace(l), ": ")
				req.Header.Add(name, value)
			}
			if req.Header.Get("Accept-Encoding") == "" {
				req.Header.Set("Accept-Encoding", "identity") // else the transport asks for gzip
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.ProtoMajor != 2 {
				t.Fatalf("answered over %s", resp.Proto)
			}
			x.check(t, resp, body)
		})
	}
}

// TestFilesStalledClient checks that a client that stops reading a large
// file is cut off by the send timeout, and the request logged.
func TestFilesStalledClient(t *testing.T) {
	st := makeSite(t)
	huge := bytes.Repeat([]byte("x"), 32<<20)
	if err := os.WriteFile(filepath.Join(st.root, "huge.bin"), huge, 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := New(Options{Root: st.root, Prefix: "/"})
	if err != nil {
		t.Fatal(err)
	}
	access := &proxytest.Buffer{}
	addr := proxytest.Serve(t, &proxy.Server{Handler: route.New(route.Route{Phases: []any{files}}),
		SendTimeout: 300 * time.Millisecond,
		ErrorLog:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog:   slog.New(slog.NewTextHandler(access, nil)),
	})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.(*net.TCPConn).SetReadBuffer(4 << 10)
	io.WriteString(nc, "GET /huge.bin HTTP/1.1\r\nHost: h\r\n\r\n")
	// Read nothing: the proxy's writes stall once the socket buffers
	// are full, and the send timeout ends the exchange.
	wait.For(t, "the access log line", func() bool { return strings.Contains(access.String(), "target=/huge.bin") })
	line := lineFor(access.String(), "target=/huge.bin")
	if !strings.Contains(line, "aborted=true") || !strings.Contains(line, "error=client_timeout") {
		t.Errorf("access log line %q: want an aborted exchange, a client timeout", line)
	}
}
