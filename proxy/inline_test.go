package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// echoBody answers with the request's method, target and body.
func echoBody(c *upstreamtest.Conn, r *upstreamtest.Request) {
	c.Respond(200, r.Method+" "+r.Target+" "+string(r.RawBody))
}

// TestRequestsOfEveryKindOnOneConnection: requests that arrived whole are
// served from inside the wait for the next request (ServeInline), the rest
// by the serve loop; one keep-alive connection alternates between them,
// one request at a time and pipelined, and each is answered in order.
func TestRequestsOfEveryKindOnOneConnection(t *testing.T) {
	up := upstreamtest.Start(t, echoBody)
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	type step struct{ req, method, want string }
	get := func(p string) step { return step{"GET " + p + " HTTP/1.1\r\nHost: a\r\n\r\n", "GET", "GET " + p + " "} }
	post := step{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", "POST", "POST /p hello"}
	chunked := step{"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "POST", "POST /c 3\r\nabc\r\n0\r\n\r\n"}
	empty := step{"PUT /e HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", "PUT", "PUT /e "}
	head := step{"HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n", "HEAD", ""}
	seqs := [][]step{
		{get("/1")}, {post}, {get("/2")}, {chunked}, {empty}, {head}, {get("/3")},
		{get("/4"), post, get("/5")}, // pipelined: a body between two bodiless requests
		{post, get("/6"), get("/7")}, // pipelined: bodiless requests after a body
		{get("/8"), chunked, head, get("/9")},
	}
	for _, seq := range seqs {
		var all strings.Builder
		for _, s := range seq {
			all.WriteString(s.req)
		}
		c.send(all.String())
		for _, s := range seq {
			resp, body := c.response(s.method)
			if resp.StatusCode != 200 || body != s.want {
				t.Fatalf("after %q: got %d %q, want 200 %q", s.req, resp.StatusCode, body, s.want)
			}
		}
	}
}

// TestBodiesInPiecesAfterInlineRequests: requests whose body is not all
// there with the head (it follows later, or it is larger than preread
// takes) are left to the serve loop, between requests served inline.
func TestBodiesInPiecesAfterInlineRequests(t *testing.T) {
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Respond(200, fmt.Sprintf("%s %s %d", r.Method, r.Target, len(r.RawBody)))
	})
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	big := strings.Repeat("b", prereadMax+1)
	six := strings.Repeat("s", 6000) // with its head, more than the first read's 4 KiB
	sixHead := "POST /six HTTP/1.1\r\nHost: a\r\nContent-Length: 6000\r\n\r\n"
	firstRead := 4096 - len(sixHead) // what of the body fills the first read
	steps := []struct {
		parts []string
		want  string
	}{
		{[]string{"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"}, "GET /1 0"},
		{[]string{"POST /late HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhe", "llo"}, "POST /late 5"},
		{[]string{"POST /whole HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"}, "POST /whole 5"},
		{[]string{fmt.Sprintf("POST /big HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", len(big), big)}, fmt.Sprintf("POST /big %d", len(big))},
		{[]string{sixHead + six}, "POST /six 6000"},
		{[]string{sixHead + six[:firstRead], six[firstRead:]}, "POST /six 6000"},
		{[]string{sixHead + six[:firstRead+10], six[firstRead+10:]}, "POST /six 6000"},
		{[]string{"GET /2 HTTP/1.1\r\nHost: a\r\n\r\n"}, "GET /2 0"},
	}
	for _, st := range steps {
		for i, p := range st.parts {
			if i > 0 {
				hs.waitRead(t, c.nc) // the next part comes in a read of its own
			}
			c.send(p)
		}
		method, _, _ := strings.Cut(st.parts[0], " ")
		if resp, body := c.response(method); resp.StatusCode != 200 || body != st.want {
			t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, st.want)
		}
	}
}

// TestRequestArrivingWhileOneIsServed: a request the client sends while the
// previous one is still being served inline is answered right after it. The
// poller's report of its arrival must not be lost: the server has no
// parker here, so a lost report would leave the request unread until the
// idle timeout, a minute away, long after the client's reads time out.
func TestRequestArrivingWhileOneIsServed(t *testing.T) {
	// The upstream holds /slow until the test has /next in the proxy's
	// socket.
	arrived, release := make(chan struct{}), make(chan struct{})
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Target == "/slow" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-c.Done():
			}
		}
		c.Respond(200, r.Target)
	})
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) {
		s.init()
		s.parker.Close() // none: the connection waits with its goroutine
		s.parker = nil
	})
	c := hs.dial(t)
	for i := 0; i < 3; i++ {
		c.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
		<-arrived // the first is at the upstream
		c.send("GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
		hs.waitDelivered(t, c.nc)
		release <- struct{}{}
		for _, want := range []string{"/slow", "/next"} {
			resp, body := c.response("GET")
			if resp.StatusCode != 200 || body != want {
				t.Fatalf("round %d: got %d %q, want %q", i, resp.StatusCode, body, want)
			}
		}
	}
}

// TestHeadInPiecesAfterInlineRequest: after a request served inline, the
// next head arrives in pieces and is read under the header timeout.
func TestHeadInPiecesAfterInlineRequest(t *testing.T) {
	up := upstreamtest.Start(t, echoBody)
	hs := start(t, peers(testOptions(), up.Addr()))
	c := hs.dial(t)
	if resp, _ := c.roundTrip("GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	c.send("GET /2 HTTP/1.1\r\nHo")
	hs.waitRead(t, c.nc)
	c.send("st: a\r\n\r\n")
	if resp, body := c.response("GET"); resp.StatusCode != 200 || body != "GET /2 " {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}
