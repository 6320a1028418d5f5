package proxy

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// A plain listener with a RedirectHTTPS Handler answers every request 308
// to https://, the host without the plain port, the path and query kept;
// the Server's own Handler is not asked.
func TestRedirectHTTPS(t *testing.T) {
	tests := []struct {
		name, req string
		port      int
		want      string
	}{
		{"host and query", "GET /a/b?q=1&r=2 HTTP/1.1\r\nHost: example.com\r\n\r\n", 443, "https://example.com/a/b?q=1&r=2"},
		{"the plain port dropped", "GET /x HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", 0, "https://example.com/x"},
		{"another HTTPS port", "GET /x HTTP/1.1\r\nHost: example.com:80\r\n\r\n", 8443, "https://example.com:8443/x"},
		{"IPv6 literal", "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", 443, "https://[2001:db8::1]/"},
		{"absolute-form target", "GET http://other.test:80/y?z HTTP/1.1\r\nHost: ignored.test\r\n\r\n", 443, "https://other.test/y?z"},
		{"HTTP/1.0 without Host: the address connected to", "GET /p HTTP/1.0\r\n\r\n", 443, "https://127.0.0.1/p"},
		{"POST keeps its method under 308", "POST /form HTTP/1.1\r\nHost: example.com\r\nContent-Length: 2\r\n\r\nhi", 443, "https://example.com/form"},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n", 443, "https://example.com/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := &harness{errors: &logBuffer{}, access: &logBuffer{}}
			hs.srv = &Server{Handler: peers(testOptions(), "127.0.0.1:1"), ErrorLog: slog.New(slog.NewTextHandler(hs.errors, nil))}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			hs.addr = ln.Addr().String()
			go hs.srv.ServeWith(ln, ListenerOptions{Handler: &RedirectHTTPS{Port: tt.port}})
			t.Cleanup(func() { hs.srv.Shutdown(context.Background()) })
			c := hs.dial(t)
			resp, _ := c.roundTrip(tt.req)
			if resp.StatusCode != 308 || resp.Header.Get("Location") != tt.want {
				t.Fatalf("got %d Location %q, want 308 %q", resp.StatusCode, resp.Header.Get("Location"), tt.want)
			}
			if tt.req[0] == 'G' && strings.Contains(tt.req, "HTTP/1.1") && resp.Close {
				t.Error("the connection closes after a redirect of a request without a body")
			}
		})
	}
}

// filterFunc is a RequestFilter made of a function.
type filterFunc func(*Session) *Response

func (f filterFunc) RequestFilter(s *Session) *Response { return f(s) }

// teapot is a Handler whose RequestFilter answers every request 418.
type teapot struct{ *rotate }

func (teapot) RequestFilter(*Session) *Response { return Text(418, "teapot\n") }

// A listener's Filter sees each request before the listener's Handler
// (a RedirectHTTPS) or the Server's (and before that Handler's own
// RequestFilter); what it passes on is served as without it.
func TestListenerFilter(t *testing.T) {
	challenge := filterFunc(func(s *Session) *Response {
		if string(s.Request.Path()) == "/.well-known/acme-challenge/tok" {
			return Text(200, "tok.key")
		}
		return nil
	})
	for _, tt := range []struct {
		name     string
		own      Handler
		passedOn int
	}{
		{"in front of a RedirectHTTPS", &RedirectHTTPS{}, 308},
		{"in front of the Server's Handler and its RequestFilter", nil, 418},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hs := &harness{errors: &logBuffer{}, access: &logBuffer{}}
			hs.srv = &Server{Handler: teapot{peers(testOptions(), "127.0.0.1:1")}, ErrorLog: slog.New(slog.NewTextHandler(hs.errors, nil))}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			hs.addr = ln.Addr().String()
			go hs.srv.ServeWith(ln, ListenerOptions{Handler: tt.own, Filter: challenge})
			t.Cleanup(func() { hs.srv.Shutdown(context.Background()) })
			c := hs.dial(t)
			resp, body := c.roundTrip("GET /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: example.com\r\n\r\n")
			if resp.StatusCode != 200 || body != "tok.key" {
				t.Errorf("filtered: got %d %q, want 200 %q", resp.StatusCode, body, "tok.key")
			}
			// The same connection goes on to a request the filter passes on.
			if resp, _ := c.roundTrip("GET /other HTTP/1.1\r\nHost: example.com\r\n\r\n"); resp.StatusCode != tt.passedOn {
				t.Errorf("passed on: got %d, want %d", resp.StatusCode, tt.passedOn)
			}
		})
	}
}
