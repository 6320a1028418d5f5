package proxy

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/retry"
)

// naming tells the client which peer answered, from ResponseFilter.
type naming struct{ ordered }

var _ ResponseFilter = (*naming)(nil)

func (h *naming) ResponseFilter(_ *Session, peer *Peer, resp *h1.Response) {
	resp.Header.Set("X-Answered-By", peer.Addr)
	resp.Header.Del("Server")
}

// TestResponseFilterSeesTheAnsweringPeer: after a retry, ResponseFilter is
// given the peer whose response it is, and its changes reach the client.
func TestResponseFilterSeesTheAnsweringPeer(t *testing.T) {
	a := upstreamtest.Dead(t)
	b := upstreamtest.Start(t, upstreamtest.OK("B"))
	hs := start(t, &naming{*inOrder(withPolicy(&retry.Policy{}), a, b.Addr())})
	resp, body := hs.do(t, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.StatusCode != 200 || body != "B" || resp.Header.Get("X-Answered-By") != b.Addr() {
		t.Fatalf("got %d %q X-Answered-By %q, want B's address %s", resp.StatusCode, body, resp.Header.Get("X-Answered-By"), b.Addr())
	}
}

// addsField adds a response field to requests for /tag/, and answers
// /own/ itself; the rest goes to the upstream.
type addsField struct{ *rotate }

func (h addsField) RequestFilter(s *Session) *Response {
	path := string(s.Request.Path())
	if strings.HasPrefix(path, "/tag/") || strings.HasPrefix(path, "/own/tag") {
		s.AddResponseField([]byte("X-Tag"), []byte(path))
		// Framing and connection fields are sluice's: ignored.
		s.AddResponseField([]byte("Content-Length"), []byte("1"))
		s.AddResponseField([]byte("transfer-encoding"), []byte("chunked"))
		s.AddResponseField([]byte("Connection"), []byte("close"))
	}
	if strings.HasPrefix(path, "/own/") {
		return Text(200, "own\n")
	}
	return nil
}

// TestAddResponseField: a field a request phase adds is on the response
// the client gets, the upstream's or sluice's own, and only on that
// request's, over HTTP/1.1 and HTTP/2.
func TestAddResponseField(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	h := addsField{peers(testOptions(), up.Addr())}
	hs, client := startH2(t, h, h2c())
	c := hs.dial(t)
	for _, tt := range []struct{ path, tag string }{
		{"/tag/a", "/tag/a"}, {"/plain", ""}, {"/own/tag", "/own/tag"}, {"/own/x", ""},
	} {
		resp, _ := c.roundTrip("GET " + tt.path + " HTTP/1.1\r\nHost: h\r\n\r\n")
		if resp.StatusCode != 200 || resp.Header.Get("X-Tag") != tt.tag || resp.Close || len(resp.TransferEncoding) > 0 ||
			len(resp.Header.Values("Content-Length")) > 1 || resp.ContentLength <= 1 {
			t.Errorf("HTTP/1.1 %s: %d X-Tag %q close=%v TE=%v CL=%v, want %q and sluice's framing", tt.path, resp.StatusCode,
				resp.Header.Get("X-Tag"), resp.Close, resp.TransferEncoding, resp.Header.Values("Content-Length"), tt.tag)
		}
		r2, err := client.Get("http://" + hs.addr + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		r2.Body.Close()
		if r2.StatusCode != 200 || r2.Header.Get("X-Tag") != tt.tag {
			t.Errorf("HTTP/2 %s: %d X-Tag %q, want %q", tt.path, r2.StatusCode, r2.Header.Get("X-Tag"), tt.tag)
		}
	}
}
