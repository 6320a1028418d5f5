package proxy

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestBodyAfterFullHeadRead: the read of a response head that fills the
// buffer is followed by a read that does not wait, for the rest of a body
// that came whole. A body whose rest comes later, or that comes whole, or
// that is cut by a reset, must reach the client as with ordinary reads.
func TestBodyAfterFullHeadRead(t *testing.T) {
	body := strings.Repeat("0123456789abcdef", 750) // 12000 bytes
	head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body))
	// The rest of the body comes once the client has the first 5000
	// bytes: sluice has read them all, and waits for more.
	rest := make(chan struct{})
	cases := []struct {
		name string
		send func(c *upstreamtest.Conn)
		want int           // status the client gets; 0: the connection is cut
		rest chan struct{} // closed by the test once it read 5000 body bytes
	}{
		{"whole", func(c *upstreamtest.Conn) { c.WriteString(head + body) }, 200, nil},
		{"rest later", func(c *upstreamtest.Conn) {
			c.WriteString(head + body[:5000])
			select {
			case <-rest:
			case <-c.Done():
			}
			c.WriteString(body[5000:])
		}, 200, rest},
		{"reset after part", func(c *upstreamtest.Conn) {
			c.WriteString(head + body[:5000])
			c.Reset()
		}, 0, nil},
		{"reset after the first read's worth", func(c *upstreamtest.Conn) {
			// Exactly what fills sluice's first read (4 KiB): the read
			// that does not wait then finds the reset, not data.
			c.WriteString(head + body[:4096-len(head)])
			c.Reset()
		}, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) { tc.send(c) })
			hs := start(t, peers(testOptions(), up.Addr()))
			c := hs.dial(t)
			c.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
			if tc.rest != nil {
				if h := readRawHead(t, c); !strings.HasPrefix(h, "HTTP/1.1 200 ") {
					t.Fatalf("head %q", h)
				}
				b := make([]byte, len(body))
				if _, err := io.ReadFull(c.br, b[:5000]); err != nil {
					t.Fatalf("the first 5000 bytes: %v", err)
				}
				close(tc.rest)
				if _, err := io.ReadFull(c.br, b[5000:]); err != nil || string(b) != body {
					t.Fatalf("the body: %v", err)
				}
				return
			}
			if tc.want == 0 {
				if resp, err := readHTTP(c); err == nil {
					buf := make([]byte, len(body))
					n, _ := resp.Body.Read(buf)
					for m := n; m > 0 && n < len(body); n += m {
						m, _ = resp.Body.Read(buf[n:])
					}
					if n == len(body) {
						t.Fatal("the whole body arrived from an upstream that reset the connection")
					}
				}
				wait.For(t, "the reset in the error log", func() bool { return strings.Contains(hs.errors.String(), "connection_reset") })
				return
			}
			resp, got := c.response("GET")
			if resp.StatusCode != tc.want || got != body {
				t.Fatalf("got %d and %d bytes, want %d and %d", resp.StatusCode, len(got), tc.want, len(body))
			}
		})
	}
}

// TestChunksGatheredNotHeld: chunks that arrive together reach the client
// byte for byte (in one write), and a chunk that arrives alone reaches it
// before the upstream sends the next: gathering never waits for more.
func TestChunksGatheredNotHeld(t *testing.T) {
	var many strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&many, "%x;n=%d\r\n%s\r\n", i, i, strings.Repeat("x", i))
	}
	many.WriteString("0\r\nX-Trailer: t\r\n\r\n")
	got := make(chan struct{})
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		if r.Target == "/many" {
			c.WriteString(many.String())
			return
		}
		c.WriteString("5\r\nfirst\r\n")
		select {
		case <-got: // the client has the first chunk
		case <-time.After(wait.Timeout):
		}
		c.WriteString("6\r\nsecond\r\n0\r\n\r\n")
	})
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)

	c.send("GET /many HTTP/1.1\r\nHost: a\r\n\r\n")
	readRawHead(t, c)
	body := make([]byte, many.Len())
	if _, err := io.ReadFull(c.br, body); err != nil || string(body) != many.String() {
		t.Fatalf("body %q, %v; want %q", body, err, many.String())
	}

	c.send("GET /one-by-one HTTP/1.1\r\nHost: a\r\n\r\n")
	readRawHead(t, c)
	first := make([]byte, len("5\r\nfirst\r\n"))
	c.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(c.br, first); err != nil || string(first) != "5\r\nfirst\r\n" {
		t.Fatalf("first chunk %q, %v: held back while the upstream waited", first, err)
	}
	close(got)
	rest := make([]byte, len("6\r\nsecond\r\n0\r\n\r\n"))
	c.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(c.br, rest); err != nil || string(rest) != "6\r\nsecond\r\n0\r\n\r\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

// TestCutResponseEndsInReset: a response that fails after its first byte
// went to the client is aborted, and the client sees a reset, never the
// FIN that would end a close-delimited body as if it were complete: one
// case per framing the client sees.
func TestCutResponseEndsInReset(t *testing.T) {
	chunkedCut := func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
		c.Close()
	}
	partial := make(chan struct{}) // closed once the client got "partial"
	tests := []struct {
		name    string
		up      upstreamtest.Handler
		version string
		framing string // how the client's response is framed
		partial bool   // the upstream resets once the client got "partial"
	}{
		{"Content-Length", upstreamtest.Truncated(), "HTTP/1.1", "Content-Length: 100", false},
		{"chunked", chunkedCut, "HTTP/1.1", "Transfer-Encoding: chunked", false},
		{"close-delimited to HTTP/1.0", chunkedCut, "HTTP/1.0", "Connection: close", false},
		{"close-delimited, upstream reset", func(c *upstreamtest.Conn, r *upstreamtest.Request) {
			c.WriteString("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npartial")
			select {
			case <-partial: // the response has begun going to the client
			case <-c.Done():
			}
			c.Reset()
		}, "HTTP/1.1", "Connection: close", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := upstreamtest.Start(t, tt.up)
			hs := start(t, peers(testOptions(), up.Addr()))
			c := hs.dial(t)
			c.send("GET / " + tt.version + "\r\nHost: a\r\n\r\n")
			c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			var before string
			if tt.partial {
				before = c.readUntil("partial")
				close(partial)
			}
			rest, err := io.ReadAll(c.br)
			got := before + string(rest)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("client read %q and then %v, want a reset", got, err)
			}
			if len(got) > 0 && !strings.Contains(got, tt.framing) {
				t.Fatalf("client got %q, want a head framed with %s", got, tt.framing)
			}
		})
	}
}
