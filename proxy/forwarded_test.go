package proxy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
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
