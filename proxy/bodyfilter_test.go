package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// upper is a BodyFilter that upper-cases the body and records its calls.
type upper struct {
	mu     sync.Mutex
	w      io.Writer
	calls  []string
	closed chan struct{} // closed by Close or Abort
}

func newUpper() *upper { return &upper{closed: make(chan struct{})} }

func (u *upper) record(c string) {
	u.mu.Lock()
	u.calls = append(u.calls, c)
	u.mu.Unlock()
}

func (u *upper) Start(w io.Writer) { u.w = w; u.record("start") }

func (u *upper) Write(p []byte) (int, error) {
	u.record("write")
	return u.w.Write(bytes.ToUpper(p))
}

func (u *upper) Flush() error { u.record("flush"); return nil }
func (u *upper) Close() error { u.record("close"); close(u.closed); return nil }
func (u *upper) Abort()       { u.record("abort"); close(u.closed) }

func (u *upper) String() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.calls, " ")
}

// filtering installs an upper filter on every response, handing each to
// filters.
type filtering struct {
	*rotate
	filters chan *upper
}

func (h *filtering) ResponseFilter(s *Session, _ *Peer, resp *h1.Response) {
	u := newUpper()
	s.FilterBody(u)
	s.Note("filtered", "upper")
	h.filters <- u
}

func newFiltering(addr string) *filtering {
	return &filtering{rotate: peers(testOptions(), addr), filters: make(chan *upper, 16)}
}

// TestBodyFilterFraming checks the re-framing of a filtered body, byte for
// byte: whatever the upstream's framing, an HTTP/1.1 client gets the
// filter's output chunked, with no Content-Length, on a connection kept
// alive; an HTTP/1.0 client gets it until the connection closes. A
// response without a body is relayed as it is, its filter aborted
// unstarted.
func TestBodyFilterFraming(t *testing.T) {
	tests := []struct {
		name     string
		upstream string // the response after its status line
		request  string // method and version
		wantBody string // the body on the wire
		keep     bool   // the connection stays open
		calls    string
	}{
		{"length", "Content-Length: 5\r\n\r\nhello", "GET / HTTP/1.1", "5\r\nHELLO\r\n0\r\n\r\n", true,
			"start write close"},
		{"chunked", "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nT: v\r\n\r\n", "GET / HTTP/1.1",
			"5\r\nABCDE\r\n0\r\nT: v\r\n\r\n", true, "start write write flush close"}, // the trailers follow
		{"until close", "Connection: close\r\n\r\nxyz", "GET / HTTP/1.1", "3\r\nXYZ\r\n0\r\n\r\n", true,
			"start write flush close"}, // the end is a read away
		{"HTTP/1.0 client", "Content-Length: 5\r\n\r\nhello", "GET / HTTP/1.0", "HELLO", false,
			"start write close"},
		{"HEAD", "Content-Length: 5\r\n\r\n", "HEAD / HTTP/1.1", "", true, "abort"},
		{"204", "\r\n", "GET / HTTP/1.1", "", true, "abort"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status := "HTTP/1.1 200 OK\r\n"
			if tt.name == "204" {
				status = "HTTP/1.1 204 No Content\r\n"
			}
			up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
				c.WriteString(status + tt.upstream)
				if strings.Contains(tt.upstream, "Connection: close") {
					c.Close()
				}
			})
			h := newFiltering(up.Addr())
			hs := start(t, h)
			c := hs.dial(t)
			c.send(tt.request + "\r\nHost: test\r\n\r\n")
			var got []byte
			if tt.keep {
				// The head and body as net/http reads them (the bytes on
				// the wire: TestBodyFilterWire).
				resp, err := http.ReadResponse(c.br, &http.Request{Method: strings.Fields(tt.request)[0]})
				if err != nil {
					t.Fatal(err)
				}
				if tt.wantBody != "" && (resp.ContentLength > 0 || resp.Header.Get("Content-Length") != "") {
					t.Errorf("Content-Length %q on a filtered response", resp.Header.Get("Content-Length"))
				}
				if tt.wantBody != "" {
					if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
						t.Errorf("Transfer-Encoding %v, want chunked", resp.TransferEncoding)
					}
				}
				body, _ := io.ReadAll(resp.Body)
				got = body
				want := strings.ToUpper(dechunk(tt.wantBody))
				if string(got) != want {
					t.Errorf("body %q, want %q", got, want)
				}
				if _, trailer, ok := strings.Cut(tt.wantBody, "0\r\nT: "); ok {
					if v := resp.Trailer.Get("T"); v+"\r\n\r\n" != trailer {
						t.Errorf("trailer T %q, want the upstream's", v)
					}
				}
				// The connection is kept: a second request is served.
				method := strings.Fields(tt.request)[0]
				c.send(method + " / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
				if _, err := http.ReadResponse(c.br, &http.Request{Method: method}); err != nil {
					t.Errorf("second request on the connection: %v", err)
				}
			} else {
				all, err := io.ReadAll(c.br)
				if err != nil {
					t.Fatal(err)
				}
				head, body, _ := strings.Cut(string(all), "\r\n\r\n")
				if body != tt.wantBody {
					t.Errorf("body on the wire %q, want %q", body, tt.wantBody)
				}
				if !strings.Contains(head, "Connection: close") || strings.Contains(head, "Content-Length") ||
					strings.Contains(head, "Transfer-Encoding") {
					t.Errorf("head %q: want Connection: close and no framing field", head)
				}
			}
			u := <-h.filters
			<-u.closed
			if u.String() != tt.calls {
				t.Errorf("filter calls %q, want %q", u, tt.calls)
			}
		})
	}
}

// TestBodyFilterWire checks the bytes of a filtered response on the wire:
// the head and the body's one chunk, then the last chunk, nothing else.
func TestBodyFilterWire(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Raw("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"))
	h := newFiltering(up.Addr())
	hs := start(t, h, func(s *Server) { s.Forwarding.NoRequestID = true }) // bytes the same each run
	c := hs.dial(t)
	c.send("GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
	all, err := io.ReadAll(c.br)
	if err != nil {
		t.Fatal(err)
	}
	want := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nHELLO\r\n0\r\n\r\n"
	if string(all) != want {
		t.Errorf("response on the wire\n%q\nwant\n%q", all, want)
	}
	wait.For(t, "the access log line", func() bool { return strings.Contains(hs.access.String(), "filtered=upper") })
}

// dechunk returns the data of a chunked body written as the tests do (one
// data chunk at most), or the body itself.
func dechunk(b string) string {
	size, rest, ok := strings.Cut(b, "\r\n")
	if !ok || size == "0" {
		if ok {
			return ""
		}
		return b
	}
	data, _, _ := strings.Cut(rest, "\r\n")
	return data
}

// TestBodyFilterStreams checks that a body that comes in pieces reaches the
// client piece by piece: the filter is flushed and its output sent
// whenever the relay is about to wait for the upstream. The upstream sends
// its second piece only once the client has read the first, so a relay
// that held the first back would hang the test, not slow it.
func TestBodyFilterStreams(t *testing.T) {
	read := make(chan struct{})
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n")
		select {
		case <-read:
		case <-c.Done():
			return
		}
		c.WriteString("7\r\nsecond\n\r\n0\r\n\r\n")
	})
	h := newFiltering(up.Addr())
	hs := start(t, h)
	c := hs.dial(t)
	c.send("GET / HTTP/1.1\r\nHost: test\r\n\r\n")
	resp, err := readHTTP(c)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufioLine(resp.Body)
	if err != nil || line != "FIRST\n" {
		t.Fatalf("first piece %q, %v", line, err)
	}
	close(read)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "SECOND\n" {
		t.Fatalf("second piece %q, %v", rest, err)
	}
	u := <-h.filters
	<-u.closed
	if got := u.String(); !strings.HasPrefix(got, "start write flush") || !strings.HasSuffix(got, "close") {
		t.Errorf("filter calls %q: want a flush after the first piece", got)
	}
}

// bufioLine reads up to and including the first newline, byte by byte (so
// nothing past it is waited for).
func bufioLine(r io.Reader) (string, error) {
	var b []byte
	var one [1]byte
	for {
		if _, err := r.Read(one[:]); err != nil {
			return string(b), err
		}
		b = append(b, one[0])
		if one[0] == '\n' {
			return string(b), nil
		}
	}
}

// TestBodyFilterUpstreamFails checks that an upstream failing mid-body
// cuts a filtered response as any other (the client sees no complete
// response), aborts the filter, and is not retried: the response had
// started.
func TestBodyFilterUpstreamFails(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Truncated())
	other := upstreamtest.Start(t, upstreamtest.OK("other"))
	h := newFiltering(up.Addr())
	h.rotate = peers(testOptions(), up.Addr(), other.Addr())
	hs := start(t, h)
	c := hs.dial(t)
	c.send("GET / HTTP/1.1\r\nHost: test\r\n\r\n")
	resp, err := readHTTP(c)
	if err == nil {
		_, err = io.ReadAll(resp.Body)
	}
	if err == nil {
		t.Fatal("the client read a complete response")
	}
	u := <-h.filters
	<-u.closed
	if got := u.String(); !strings.HasSuffix(got, "abort") {
		t.Errorf("filter calls %q, want an abort", got)
	}
	if n := len(other.Requests()); n != 0 {
		t.Errorf("the other upstream got %d requests: a retry after the response started", n)
	}
}

// TestBodyFilterH2 checks a filtered body to an HTTP/2 client: its DATA,
// no content-length.
func TestBodyFilterH2(t *testing.T) {
	body := strings.Repeat("abcdefgh", 10000)
	up := upstreamtest.Start(t, upstreamtest.OK(body))
	h := newFiltering(up.Addr())
	hs, client := startH2(t, h, h2c())
	resp, err := client.Get("http://" + hs.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != strings.ToUpper(body) {
		t.Fatalf("body of %d bytes, %v; want the %d upper-cased", len(got), err, len(body))
	}
	if resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" {
		t.Errorf("content-length %d %q on a filtered response", resp.ContentLength, resp.Header.Get("Content-Length"))
	}
	u := <-h.filters
	<-u.closed
	if got := u.String(); !strings.HasSuffix(got, "close") {
		t.Errorf("filter calls %q", got)
	}
}

// TestBodyFilterH2Trailers: the upstream's trailers follow a filtered body
// to an HTTP/2 client too, as a trailing header block.
func TestBodyFilterH2Trailers(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n"))
	h := newFiltering(up.Addr())
	hs, client := startH2(t, h, h2c())
	resp, err := client.Get("http://" + hs.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != "HELLO" {
		t.Fatalf("body %q, %v", got, err)
	}
	if v := resp.Trailer.Get("X-Checksum"); v != "abc" {
		t.Errorf("trailer X-Checksum %q, want abc", v)
	}
}
