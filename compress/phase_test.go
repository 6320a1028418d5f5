package compress

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/net/http2"

	"github.com/sluice-proxy/sluice/internal/corpus"
	"github.com/sluice-proxy/sluice/internal/proxytest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/route"
)

// bigJSON is about 512 KiB of JSON, the same every run.
var bigJSON = string(corpus.JSON(512 << 10))

func field(name, value string) upstreamtest.Field {
	return upstreamtest.Field{Name: name, Value: value}
}

// origin answers the test paths: each a response compression must or must
// not touch.
func origin(c *upstreamtest.Conn, r *upstreamtest.Request) {
	js := field("Content-Type", "application/json")
	switch r.Target {
	case "/json":
		c.Respond(200, bigJSON, js, field("ETag", `"v1"`), field("Accept-Ranges", "bytes"))
	case "/chunked":
		var b bytes.Buffer
		b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n")
		for s := bigJSON; len(s) > 0; {
			n := min(len(s), 8000)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, s[:n])
			s = s[n:]
		}
		b.WriteString("0\r\n\r\n")
		c.Write(b.Bytes())
	case "/small":
		c.Respond(200, `{"ok":true}`, js)
	case "/encoded":
		c.Respond(200, "pretend-gzip-bytes", js, field("Content-Encoding", "gzip"))
	case "/range":
		c.Respond(206, bigJSON[:2000], js, field("Content-Range", fmt.Sprintf("bytes 0-1999/%d", len(bigJSON))))
	case "/no-transform":
		c.Respond(200, bigJSON, js, field("Cache-Control", "public, no-transform"))
	case "/png":
		c.Respond(200, bigJSON, field("Content-Type", "image/png"))
	case "/no-type":
		c.Respond(200, bigJSON)
	case "/204":
		c.Respond(204, "", js)
	case "/304":
		c.Respond(304, "", js, field("ETag", `"v1"`))
	default:
		c.Respond(404, "not found\n")
	}
}

// serve runs sluice with one route whose phase compresses with opts, to an
// upstream answering with h, and returns its address (HTTP/1.1 and h2c)
// and access log.
func serve(t testing.TB, h upstreamtest.Handler, opts Options) (string, *proxytest.Buffer) {
	t.Helper()
	up := upstreamtest.Start(t, h)
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	opt := &proxy.PeerOptions{ReadTimeout: 5 * time.Second, ResponseHeaderTimeout: 5 * time.Second}
	tbl := route.New(route.Route{Name: "api", Upstream: proxytest.Peer{P: &proxy.Peer{Addr: up.Addr(), Options: opt}},
		Phases: []any{p}})
	access := &proxytest.Buffer{}
	srv := &proxy.Server{Handler: tbl,
		ErrorLog:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(slog.NewTextHandler(access, nil)),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeWith(ln, proxy.ListenerOptions{Protocols: []string{"http/1.1", "h2c"}})
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String(), access
}

// h1Client sends HTTP/1.1 and leaves Accept-Encoding and decoding to the
// test.
var h1Client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableCompression: true}}

// h2cClient speaks HTTP/2 with prior knowledge.
var h2cClient = &http.Client{Timeout: 20 * time.Second, Transport: &http2.Transport{AllowHTTP: true, DisableCompression: true,
	DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}}

func get(t testing.TB, c *http.Client, method, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// decode decodes body with Go's decoder for coding (klauspost's gzip and
// zstd, andybalholm's brotli).
func decode(t testing.TB, coding string, body []byte) []byte {
	t.Helper()
	var r io.Reader
	switch coding {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	default:
		t.Fatalf("no decoder for %q", coding)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decoding %s: %v", coding, err)
	}
	return out
}

// TestRoundTrip checks that a big JSON body, framed by Content-Length or
// chunked, comes back byte for byte through each algorithm and Go's
// decoder, over HTTP/1.1 (chunked) and HTTP/2 (no content-length), with
// the head a compressed response needs and the access log's note.
func TestRoundTrip(t *testing.T) {
	addr, access := serve(t, origin, Options{MinSize: 1024})
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		client := h1Client
		if proto == "HTTP/2.0" {
			client = h2cClient
		}
		for _, coding := range []string{"zstd", "br", "gzip"} {
			for _, path := range []string{"/json", "/chunked"} {
				if proto == "HTTP/2.0" && path == "/json" {
					continue // the framing upstream is HTTP/1.1's affair
				}
				resp, body := get(t, client, "GET", "http://"+addr+path, "Accept-Encoding", coding)
				what := proto + " " + path + " " + coding
				if resp.Proto != proto {
					t.Fatalf("%s: answered over %s", what, resp.Proto)
				}
				if got := resp.Header.Get("Content-Encoding"); got != coding {
					t.Errorf("%s: Content-Encoding %q", what, got)
					continue
				}
				if resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" {
					t.Errorf("%s: Content-Length %d", what, resp.ContentLength)
				}
				if proto == "HTTP/1.1" && (len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked") {
					t.Errorf("%s: Transfer-Encoding %v, want chunked", what, resp.TransferEncoding)
				}
				if got := resp.Header.Values("Vary"); len(got) != 1 || got[0] != "Accept-Encoding" {
					t.Errorf("%s: Vary %q", what, got)
				}
				if path == "/json" {
					if got := resp.Header.Get("ETag"); got != `W/"v1"` {
						t.Errorf("%s: ETag %q, want the weak W/\"v1\"", what, got)
					}
					if resp.Header.Get("Accept-Ranges") != "" {
						t.Errorf("%s: Accept-Ranges kept", what)
					}
				}
				if len(body) >= len(bigJSON)/3 {
					t.Errorf("%s: %d bytes compressed from %d", what, len(body), len(bigJSON))
				}
				if got := decode(t, coding, body); string(got) != bigJSON {
					t.Errorf("%s: decoded %d bytes, not the %d sent", what, len(got), len(bigJSON))
				}
			}
		}
	}
	for _, coding := range []string{"zstd", "br", "gzip"} {
		wait.For(t, "compressed="+coding+" in the access log", func() bool {
			return strings.Contains(access.String(), " compressed="+coding+"\n")
		})
	}
}

// TestNotCompressed checks each response that is sent as it came, and
// which of them say Vary: Accept-Encoding (those that would have been
// compressed for another Accept-Encoding).
func TestNotCompressed(t *testing.T) {
	addr, access := serve(t, origin, Options{MinSize: 1024})
	tests := []struct {
		name, method, path string
		header             []string
		vary               bool
		etag               string
		encoding           string // Content-Encoding, the upstream's
	}{
		{"no Accept-Encoding", "GET", "/json", nil, true, `"v1"`, ""},
		{"identity", "GET", "/json", []string{"Accept-Encoding", "identity"}, true, `"v1"`, ""},
		{"q=0", "GET", "/json", []string{"Accept-Encoding", "gzip;q=0, br;q=0, zstd;q=0"}, true, `"v1"`, ""},
		{"unknown coding", "GET", "/json", []string{"Accept-Encoding", "deflate"}, true, `"v1"`, ""},
		{"identity preferred", "GET", "/json", []string{"Accept-Encoding", "gzip;q=0.1, identity"}, true, `"v1"`, ""},
		{"below min_size", "GET", "/small", []string{"Accept-Encoding", "gzip"}, false, "", ""},
		{"already encoded", "GET", "/encoded", []string{"Accept-Encoding", "gzip"}, false, "", "gzip"},
		{"206", "GET", "/range", []string{"Accept-Encoding", "gzip", "Range", "bytes=0-1999"}, false, "", ""},
		{"no-transform", "GET", "/no-transform", []string{"Accept-Encoding", "gzip"}, false, "", ""},
		{"request no-transform", "GET", "/json", []string{"Accept-Encoding", "gzip", "Cache-Control", "no-transform"}, false, `"v1"`, ""},
		{"type", "GET", "/png", []string{"Accept-Encoding", "gzip"}, false, "", ""},
		{"no type", "GET", "/no-type", []string{"Accept-Encoding", "gzip"}, false, "", ""},
		{"HEAD", "HEAD", "/json", []string{"Accept-Encoding", "gzip"}, true, `W/"v1"`, ""},
		{"204", "GET", "/204", []string{"Accept-Encoding", "gzip"}, false, "", ""},
		{"304", "GET", "/304", []string{"Accept-Encoding", "gzip"}, true, `W/"v1"`, ""},
	}
	direct := map[string]int{"/json": len(bigJSON), "/small": len(`{"ok":true}`), "/encoded": len("pretend-gzip-bytes"),
		"/range": 2000, "/no-transform": len(bigJSON), "/png": len(bigJSON), "/no-type": len(bigJSON)}
	for _, tt := range tests {
		resp, body := get(t, h1Client, tt.method, "http://"+addr+tt.path, tt.header...)
		if got := resp.Header.Get("Content-Encoding"); got != tt.encoding {
			t.Errorf("%s: Content-Encoding %q, want %q", tt.name, got, tt.encoding)
		}
		if got := resp.Header.Get("Vary") == "Accept-Encoding"; got != tt.vary {
			t.Errorf("%s: Vary %q, want it %v", tt.name, resp.Header.Get("Vary"), tt.vary)
		}
		if got := resp.Header.Get("ETag"); got != tt.etag {
			t.Errorf("%s: ETag %q, want %q", tt.name, got, tt.etag)
		}
		if n, ok := direct[tt.path]; ok && tt.method == "GET" {
			if len(body) != n || resp.ContentLength != int64(n) {
				t.Errorf("%s: %d bytes, Content-Length %d, want the upstream's %d", tt.name, len(body), resp.ContentLength, n)
			}
		}
		if tt.method == "HEAD" && resp.ContentLength != int64(len(bigJSON)) {
			t.Errorf("%s: Content-Length %d, want the upstream's", tt.name, resp.ContentLength)
		}
	}
	if strings.Contains(access.String(), "compressed=") {
		t.Errorf("access log notes a compression:\n%s", access)
	}
}

// TestStreams checks that a body the upstream sends in pieces reaches the
// client in pieces, decoded as each arrives, over HTTP/1.1 and HTTP/2: the
// upstream sends its next event only once the client has decoded the
// last, so a compressor holding one back would hang the test.
func TestStreams(t *testing.T) {
	for _, tc := range []struct {
		coding string
		client *http.Client
	}{{"gzip", h1Client}, {"br", h1Client}, {"zstd", h1Client}, {"gzip", h2cClient}, {"zstd", h2cClient}} {
		coding := tc.coding
		name := coding + " HTTP/1.1"
		if tc.client == h2cClient {
			name = coding + " HTTP/2"
		}
		t.Run(name, func(t *testing.T) {
			next := make(chan struct{})
			h := func(c *upstreamtest.Conn, r *upstreamtest.Request) {
				c.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				for i := range 3 {
					ev := fmt.Sprintf("data: event %d\n\n", i)
					c.WriteString(fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev))
					select {
					case <-next:
					case <-c.Done():
						return
					}
				}
				c.WriteString("0\r\n\r\n")
			}
			addr, _ := serve(t, h, Options{})
			req, _ := http.NewRequest("GET", "http://"+addr+"/events", nil)
			req.Header.Set("Accept-Encoding", coding)
			resp, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.Header.Get("Content-Encoding") != coding {
				t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
			}
			r := decoder(t, coding, resp.Body)
			for i := range 3 {
				want := fmt.Sprintf("data: event %d\n\n", i)
				got := make([]byte, len(want))
				if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
					t.Fatalf("event %d: %q, %v", i, got, err)
				}
				next <- struct{}{}
			}
			if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
				t.Fatalf("after the events: %q, %v", rest, err)
			}
		})
	}
}

// decoder returns a streaming decoder of r.
func decoder(t testing.TB, coding string, r io.Reader) io.Reader {
	t.Helper()
	switch coding {
	case "gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		return zr
	case "br":
		return brotli.NewReader(r)
	case "zstd":
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(zr.Close)
		return zr
	}
	t.Fatalf("no decoder for %q", coding)
	return nil
}

// TestCurl checks the compressed JSON against curl's decoders (zlib,
// libbrotli, libzstd): --compressed with each coding asked for alone, and
// with curl's own Accept-Encoding (all it supports; zstd is sluice's
// first choice).
func TestCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is required when CI=true (Debian: apt-get install curl)")
		}
		t.Skip("curl is missing (Debian: apt-get install curl)")
	}
	features, _ := exec.Command(curl, "-V").Output()
	addr, _ := serve(t, origin, Options{})
	dir := t.TempDir()
	for _, tt := range []struct{ accept, feature, want string }{
		{"gzip", "libz", "gzip"},
		{"br", "brotli", "br"},
		{"zstd", "zstd", "zstd"},
		{"", "", "zstd"}, // curl's own list
	} {
		if tt.feature != "" && !bytes.Contains(features, []byte(" "+tt.feature)) {
			if os.Getenv("CI") == "true" && tt.feature == "libz" {
				t.Fatalf("curl without %s", tt.feature)
			}
			t.Logf("curl has no %s: %s not tried", tt.feature, tt.want)
			continue
		}
		out, headers := filepath.Join(dir, "body"), filepath.Join(dir, "headers")
		args := []string{"-sS", "--compressed", "-o", out, "-D", headers}
		if tt.accept != "" {
			args = append(args, "-H", "Accept-Encoding: "+tt.accept)
		}
		for _, path := range []string{"/json", "/chunked"} {
			if msg, err := exec.Command(curl, append(args, "http://"+addr+path)...).CombinedOutput(); err != nil {
				t.Fatalf("curl %s %s: %v\n%s", tt.accept, path, err, msg)
			}
			head, _ := os.ReadFile(headers)
			if !strings.Contains(strings.ToLower(string(head)), "content-encoding: "+tt.want+"\r\n") {
				t.Errorf("curl %q %s: want Content-Encoding %s in\n%s", tt.accept, path, tt.want, head)
			}
			body, _ := os.ReadFile(out)
			if string(body) != bigJSON {
				t.Errorf("curl %q %s: %d bytes decoded, not the %d sent", tt.accept, path, len(body), len(bigJSON))
			}
		}
	}
}

// TestUpstreamFailsWhileCompressing checks the retry invariant with a
// compressor in the way: an upstream that dies mid-body after the
// compressed response started is not retried (the other upstream, which
// a GET failing before its response would go to, gets nothing), and the
// client gets a cut response, not a complete-looking one.
func TestUpstreamFailsWhileCompressing(t *testing.T) {
	dying := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.WriteString(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			len(bigJSON), bigJSON[:100<<10]))
		c.Close()
	})
	other := upstreamtest.Start(t, upstreamtest.OK("other"))
	p, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	opt := &proxy.PeerOptions{ReadTimeout: 5 * time.Second}
	tbl := route.New(route.Route{Name: "api", Phases: []any{p},
		Upstream: proxytest.Untried{{Addr: dying.Addr(), Options: opt}, {Addr: other.Addr(), Options: opt}}})
	srv := &proxy.Server{Handler: tbl, ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := h1Client.Do(req)
	if err != nil {
		t.Fatal(err) // the head went out before the upstream died
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the client read a complete response")
	}
	if n := len(other.Requests()); n != 0 {
		t.Errorf("the other upstream got %d requests: a retry after the response started", n)
	}
}
