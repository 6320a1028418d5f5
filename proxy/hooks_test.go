package proxy

import (
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
