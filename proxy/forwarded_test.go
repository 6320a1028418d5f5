package proxy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// X-Forwarded-For, -Proto and -Host from a trusted peer are kept (For
// extended with the peer's address); from any other client they are
// replaced, over plain HTTP and over TLS. The test's client is 127.0.0.1,
// trusted or not.
func TestForwardedFieldsTrustedOrNot(t *testing.T) {
	sent := "X-Forwarded-For: 203.0.113.7\r\nX-Forwarded-For: 10.1.2.3\r\n" +
		"X-Forwarded-Proto: https\r\nX-Forwarded-Host: public.example\r\n"
	tests := []struct {
		name         string
		trusted      []netip.Prefix
		tls          bool
		fields       string // what the client sends besides Host
		for_, proto  string
		host         string
		forFieldsOut int
	}{
		{"untrusted", nil, false, sent, "127.0.0.1", "http", "internal.test", 1},
		{"untrusted, over TLS", nil, true, "X-Forwarded-Proto: http\r\n", "127.0.0.1", "https", "internal.test", 1},
		{"trusted by prefix", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, false, sent,
			"203.0.113.7, 10.1.2.3, 127.0.0.1", "https", "public.example", 1},
		{"trusted by address", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, false, sent,
			"203.0.113.7, 10.1.2.3, 127.0.0.1", "https", "public.example", 1},
		{"another peer trusted", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, false, sent,
			"127.0.0.1", "http", "internal.test", 1},
		{"trusted, nothing sent", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, true, "",
			"127.0.0.1", "https", "internal.test", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := upstreamtest.Start(t, upstreamtest.OK("ok"))
			tweak := func(s *Server) { s.Forwarding.Trusted = tt.trusted }
			req := "GET / HTTP/1.1\r\nHost: internal.test\r\n" + tt.fields + "\r\n"
			if tt.tls {
				site := newSite(t)
				hs := startTLS(t, peers(testOptions(), up.Addr()), site.server(), tweak)
				c := hs.mustDialTLS(t, site.client())
				if resp, _ := c.roundTrip(req); resp.StatusCode != 200 {
					t.Fatal(resp.Status)
				}
			} else {
				hs := start(t, peers(testOptions(), up.Addr()), tweak)
				if resp, _ := hs.do(t, req); resp.StatusCode != 200 {
					t.Fatal(resp.Status)
				}
			}
			r := up.Requests()[0]
			if got := r.Get("X-Forwarded-For"); got != tt.for_ {
				t.Errorf("X-Forwarded-For %q, want %q", got, tt.for_)
			}
			if n := strings.Count(strings.ToLower(string(r.RawHead)), "x-forwarded-for:"); n != tt.forFieldsOut {
				t.Errorf("%d X-Forwarded-For fields upstream, want %d: %q", n, tt.forFieldsOut, r.RawHead)
			}
			if got := r.Get("X-Forwarded-Proto"); got != tt.proto {
				t.Errorf("X-Forwarded-Proto %q, want %q", got, tt.proto)
			}
			if got := r.Get("X-Forwarded-Host"); got != tt.host {
				t.Errorf("X-Forwarded-Host %q, want %q", got, tt.host)
			}
		})
	}
}

// clientOf answers every request with the client the session judges by,
// and its peer, without an upstream.
type clientOf struct{}

func (clientOf) UpstreamPeer(*Session) (*Peer, error) { return nil, nil }
func (clientOf) RequestFilter(s *Session) *Response {
	return Text(200, s.ClientIP.String()+" "+s.Client+" "+s.Peer)
}

// TestClientFromXFF: with Forwarding.ClientFromXFF, a trusted peer's
// X-Forwarded-For names the client (the rightmost address that is not
// itself trusted); an untrusted peer's names nobody.
func TestClientFromXFF(t *testing.T) {
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	lan := netip.MustParsePrefix("10.0.0.0/8")
	tests := []struct {
		name    string
		trusted []netip.Prefix
		fields  string
		client  string
	}{
		{"one hop", []netip.Prefix{loopback}, "X-Forwarded-For: 203.0.113.7\r\n", "203.0.113.7"},
		{"trusted hops skipped", []netip.Prefix{loopback, lan}, "X-Forwarded-For: 198.51.100.1, 203.0.113.7, 10.0.0.2\r\n", "203.0.113.7"},
		{"an untrusted hop stops the walk", []netip.Prefix{loopback}, "X-Forwarded-For: 203.0.113.7, 10.0.0.2\r\n", "10.0.0.2"},
		{"fields joined, last first", []netip.Prefix{loopback, lan}, "X-Forwarded-For: 203.0.113.7\r\nX-Forwarded-For: 10.1.1.1\r\n", "203.0.113.7"},
		{"all trusted: the leftmost", []netip.Prefix{loopback, lan}, "X-Forwarded-For: 10.0.0.9, 10.0.0.2\r\n", "10.0.0.9"},
		{"address and port", []netip.Prefix{loopback}, "X-Forwarded-For: [2001:db8::5]:443\r\n", "2001:db8::5"},
		{"IPv4-mapped", []netip.Prefix{loopback}, "X-Forwarded-For: ::ffff:203.0.113.7\r\n", "203.0.113.7"},
		{"garbage: the peer", []netip.Prefix{loopback}, "X-Forwarded-For: unknown\r\n", "127.0.0.1"},
		{"garbage left of an address", []netip.Prefix{loopback, lan}, "X-Forwarded-For: junk, 203.0.113.7\r\n", "203.0.113.7"},
		{"none: the peer", []netip.Prefix{loopback}, "", "127.0.0.1"},
		{"peer not trusted", []netip.Prefix{lan}, "X-Forwarded-For: 203.0.113.7\r\n", "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := start(t, clientOf{}, func(s *Server) { s.Forwarding.Trusted, s.Forwarding.ClientFromXFF = tt.trusted, true })
			resp, body := hs.do(t, "GET / HTTP/1.1\r\nHost: h\r\n"+tt.fields+"\r\n")
			if want := tt.client + " " + tt.client + " 127.0.0.1"; resp.StatusCode != 200 || body != want {
				t.Errorf("%d %q, want the client judged %q", resp.StatusCode, body, want)
			}
			wait.For(t, "the access log line", func() bool { return strings.Contains(hs.access.String(), "status=200") })
			line := hs.access.String()
			if !strings.Contains(line, "client="+tt.client+" ") || strings.Contains(line, "peer=") != (tt.client != "127.0.0.1") {
				t.Errorf("access log %q: want client=%s, and peer= when it differs", line, tt.client)
			}
		})
	}

	// Upstream, X-Forwarded-For still extends the peer's list with the
	// peer's own address.
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	hs := start(t, peers(testOptions(), up.Addr()), func(s *Server) {
		s.Forwarding.Trusted, s.Forwarding.ClientFromXFF = []netip.Prefix{loopback}, true
	})
	if resp, _ := hs.do(t, "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 203.0.113.7\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if got := up.Requests()[0].Get("X-Forwarded-For"); got != "203.0.113.7, 127.0.0.1" {
		t.Errorf("X-Forwarded-For upstream %q, want the list extended with the peer", got)
	}
}

// FuzzClientFromXFF: whatever a trusted peer sends in X-Forwarded-For,
// the client judged is the peer or an address the field holds.
func FuzzClientFromXFF(f *testing.F) {
	for _, v := range []string{"203.0.113.7", "198.51.100.1, 203.0.113.7, 10.0.0.2", "[2001:db8::5]:443",
		"::ffff:1.2.3.4", "unknown", "junk, 10.0.0.1", ",,,", " 1.2.3.4 ,", "1.2.3.4:99999"} {
		f.Add(v)
	}
	srv := &Server{Forwarding: Forwarding{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, ClientFromXFF: true}}
	peer := netip.MustParseAddr("10.9.9.9")
	f.Fuzz(func(t *testing.T, v string) {
		s := &Session{srv: srv, Client: peer.String(), ClientIP: peer, Peer: peer.String()}
		if h1.ParseRequest(&s.Request, []byte("GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: "+v+"\r\n\r\n"), 100) != nil {
			return
		}
		s.clientFromXFF()
		if s.ClientIP == peer {
			return
		}
		if !s.ClientIP.IsValid() || s.Client != s.ClientIP.String() {
			t.Fatalf("%q: client %q (%v)", v, s.Client, s.ClientIP)
		}
		found := false
		for _, e := range strings.Split(string(s.Request.Header.Get("X-Forwarded-For")), ",") {
			if a, ok := parseForwardedAddr([]byte(strings.TrimSpace(e))); ok && a == s.ClientIP {
				found = true
			}
		}
		if !found {
			t.Fatalf("%q: client %v is not in the field", v, s.ClientIP)
		}
	})
}
