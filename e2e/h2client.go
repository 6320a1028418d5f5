package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// H2Client is one HTTP/2 connection to a proxy (h2c, prior knowledge),
// shared by the goroutines that call Do, each request a stream. Each
// request is one attempt on one connection (http2.ClientConn.RoundTrip):
// unlike http2.Transport.RoundTrip, nothing resends a request the proxy
// refused or that a GOAWAY left unprocessed, so the test sees what the
// proxy did. It dials on first use and again after the connection failed
// or can take no new stream.
type H2Client struct {
	// Addr is the proxy's host:port.
	Addr string
	// Timeout bounds each request, dial included; 0 means 10 s.
	Timeout time.Duration

	mu sync.Mutex
	cc *http2.ClientConn
}

var h2Transport = &http2.Transport{
	AllowHTTP: true,
	DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	},
}

// conn returns the connection to send on, dialing when there is none that
// takes new streams.
func (c *H2Client) conn(timeout time.Duration) (*http2.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cc != nil && c.cc.CanTakeNewRequest() {
		return c.cc, nil
	}
	if c.cc != nil {
		c.cc.Close()
		c.cc = nil
	}
	nc, err := net.DialTimeout("tcp", c.Addr, timeout)
	if err != nil {
		return nil, err
	}
	cc, err := h2Transport.NewClientConn(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.cc = cc
	return cc, nil
}

// Do sends one request for path /items/ID with X-Request-Id ID and, when
// body is not nil, the body with Content-Length, and reads the response.
// It is safe for concurrent use.
func (c *H2Client) Do(method, id string, body []byte) (r Result) {
	r = Result{ID: id, Method: method, Start: time.Now()}
	defer func() { r.Duration = time.Since(r.Start) }()
	ctx, cancel := context.WithTimeout(context.Background(), orDuration(c.Timeout, 10*time.Second))
	defer cancel()
	var rd io.Reader
	if body != nil {
		// Opaque to net/http: no GetBody, so nothing could rewind it.
		rd = io.MultiReader(bytes.NewReader(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://e2e.test/items/"+id, rd)
	if err != nil {
		r.Err = err
		return r
	}
	req.Header.Set("X-Request-Id", id)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
		req.ContentLength = int64(len(body))
	}
	resp, err := c.RoundTrip(req)
	if err != nil {
		r.Err = err
		return r
	}
	r.take(resp)
	return r
}

// RoundTrip sends req as one stream of the connection, once, and returns
// the response, its body still to read. It is safe for concurrent use.
func (c *H2Client) RoundTrip(req *http.Request) (*http.Response, error) {
	cc, err := c.conn(orDuration(c.Timeout, 10*time.Second))
	if err != nil {
		return nil, err
	}
	return cc.RoundTrip(req)
}

// Close closes the connection, if any; the next Do dials again.
func (c *H2Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cc != nil {
		c.cc.Close()
		c.cc = nil
	}
}
