package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// A soak fault is what an upstream does to a request the first time it sees
// it, instead of answering it whole.
type soakFault uint8

const (
	noFault    soakFault = iota
	resetFirst           // reset after reading the request, before any response byte
	closeFirst           // close (FIN) after reading the request, before any response byte
	resetMid             // the head and half the body, then a reset
	closeMid             // the head and half the body, then a close
)

func (f soakFault) beforeResponse() bool { return f == resetFirst || f == closeFirst }
func (f soakFault) midBody() bool        { return f == resetMid || f == closeMid }

// soakUpstream answers /o?id=N&size=S&te=T with a body that depends only on
// N and S, framed by Content-Length or chunked (T), and fails about one
// request in ten the first time it sees it, in one of the soakFault ways.
// It counts how often it saw each id, and checks the bodies of POSTs.
type soakUpstream struct {
	mu     sync.Mutex
	seen   map[int]int
	faults map[int]soakFault
	bad    []string // request bodies that arrived wrong
}

func newSoakUpstream() *soakUpstream {
	return &soakUpstream{seen: map[int]int{}, faults: map[int]soakFault{}}
}

func (u *soakUpstream) handle(c *upstreamtest.Conn, r *upstreamtest.Request) {
	id, size, chunked := soakParams(r.Target)
	u.mu.Lock()
	u.seen[id]++
	first := u.seen[id] == 1
	fault := noFault
	if first {
		fault = soakRoll(id)
		if fault != noFault {
			u.faults[id] = fault
		}
	}
	if r.Method == "POST" && !bytes.Equal(r.Decoded, soakBody(id, 512)) {
		u.bad = append(u.bad, fmt.Sprintf("id %d: %d bytes", id, len(r.Decoded)))
	}
	u.mu.Unlock()

	switch fault {
	case resetFirst:
		c.Reset()
		return
	case closeFirst:
		c.Close()
		return
	}
	body := soakBody(id, size)
	var out []byte
	if chunked {
		out = append(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"...)
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 8<<10)
			out = fmt.Appendf(out, "%x\r\n", n)
			out = append(out, rest[:n]...)
			out = append(out, "\r\n"...)
			rest = rest[n:]
		}
		out = append(out, "0\r\n\r\n"...)
	} else {
		out = fmt.Appendf(out, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body))
		out = append(out, body...)
	}
	if !fault.midBody() {
		c.Write(out)
		return
	}
	c.Write(out[:len(out)-len(body)/2-10])
	c.Sent() // the half reaches sluice before the end does
	if fault == resetMid {
		c.Reset()
	} else {
		c.Close()
	}
}

// soakRoll decides, from the id alone, whether and how the upstream fails
// the first time it sees a request: one in ten, the four ways equally.
func soakRoll(id int) soakFault {
	h := fnv.New32a()
	fmt.Fprint(h, id)
	v := h.Sum32()
	if v%10 != 0 {
		return noFault
	}
	return soakFault(1 + (v/10)%4)
}

func soakParams(target string) (id, size int, chunked bool) {
	_, query, _ := strings.Cut(target, "?")
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "id":
			id, _ = strconv.Atoi(v)
		case "size":
			size, _ = strconv.Atoi(v)
		case "te":
			chunked = v == "chunked"
		}
	}
	return id, size, chunked
}

// soakBody is the body of size bytes for id: its digits and a running
// count, so that a byte out of place shows.
func soakBody(id, size int) []byte {
	b := make([]byte, 0, size+16)
	for i := 0; len(b) < size; i++ {
		b = strconv.AppendInt(b, int64(id), 10)
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, ' ')
	}
	return b[:size]
}

// soakRequest is one request of the soak and what its client got.
type soakRequest struct {
	id      int
	method  string
	http10  bool
	size    int
	chunked bool
	// What the client got: a status and a body read whole, or err.
	status int
	body   []byte
	proxy  string // Proxy-Status
	err    error
}

func soakPlan(id int) *soakRequest {
	r := &soakRequest{id: id, method: "GET", size: (id%8 + 1) * 1000, chunked: id%3 == 0, http10: id%5 == 0}
	if id%2 == 1 {
		r.method = "POST"
	}
	if id%17 == 0 {
		r.size = 150 << 10
	}
	return r
}

// TestFaultSoak runs sluice in front of three upstreams that fail one
// request in ten the first time they see it (resets and closes before the
// response and in the middle of its body, Content-Length and chunked), for
// HTTP/1.1 keep-alive and HTTP/1.0 clients, and checks every response
// byte for byte. Nothing cut may look complete; no POST may be processed
// twice; every GET that failed before a byte went out is retried and
// answered whole; every POST that did is answered 502, not resent.
func TestFaultSoak(t *testing.T) { faultSoak(t, 0) }

// TestFaultSoakH2 is TestFaultSoak with the clients' requests as streams
// of four HTTP/2 connections, which never resend: a response cut in the
// middle must reach its client as a reset stream, never as a stream that
// ends, and the other streams of its connection go on.
func TestFaultSoakH2(t *testing.T) { faultSoak(t, 4) }

// faultSoak runs the fault soak from HTTP/1.x clients or, when h2Conns is
// above 0, from streams of that many HTTP/2 connections.
func faultSoak(t *testing.T, h2Conns int) {
	if testing.Short() {
		t.Skip("the fault soak takes several seconds")
	}
	const clients, perClient = 16, 500
	up := newSoakUpstream()
	var servers []string
	for range 3 {
		servers = append(servers, "      - address: "+upstreamtest.Start(t, up.handle).Addr())
	}
	s, err := StartSluice(`listen:
  - address: 127.0.0.1:0
access_log: {enabled: false}
log: {level: error, format: json}
routes:
  - upstream: app
upstreams:
  app:
    servers:
`+strings.Join(servers, "\n")+`
    health:
      passive: {max_fails: 0, consecutive_failures: 0}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	results := make([]*soakRequest, clients*perClient)
	var h2 []*H2Client
	for range h2Conns {
		c := &H2Client{Addr: s.Addr, Timeout: 20 * time.Second}
		defer c.Close()
		h2 = append(h2, c)
	}
	var wg sync.WaitGroup
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if len(h2) > 0 {
				for i := range perClient {
					id := cl*perClient + i
					r := soakPlan(id)
					r.http10 = false
					results[id] = r
					soakDoH2(h2[cl%len(h2)], r)
				}
				return
			}
			var nc net.Conn
			var br *bufio.Reader
			for i := range perClient {
				id := cl*perClient + i
				r := soakPlan(id)
				results[id] = r
				if nc == nil || r.http10 {
					if nc != nil {
						nc.Close()
					}
					c, err := net.Dial("tcp", s.Addr)
					if err != nil {
						r.err = err
						continue
					}
					nc = c
					br = bufio.NewReader(nc)
				}
				if keep := soakDo(nc, br, r); !keep {
					nc.Close()
					nc = nil
				}
			}
			if nc != nil {
				nc.Close()
			}
		}()
	}
	wg.Wait()

	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.bad) > 0 {
		t.Errorf("request bodies that reached an upstream wrong: %v", up.bad)
	}
	counts := map[string]int{}
	for _, r := range results {
		fault := up.faults[r.id]
		seen := up.seen[r.id]
		want := soakBody(r.id, r.size)
		ok := r.err == nil && r.status == 200 && bytes.Equal(r.body, want)
		switch {
		case r.err == nil && r.status == 200 && !bytes.Equal(r.body, want):
			t.Errorf("id %d (%s %v): a complete 200 with a wrong body (%d bytes, want %d)", r.id, r.method, fault, len(r.body), len(want))
		case r.method == "POST" && seen > 1:
			t.Errorf("id %d: POST processed %d times", r.id, seen)
		case fault.midBody() && r.err == nil:
			t.Errorf("id %d (%s, fault %d): the upstream cut the body, the client got a complete %d", r.id, r.method, fault, r.status)
		case fault.beforeResponse() && r.method == "GET" && !ok:
			t.Errorf("id %d: GET failed before a byte went out and was not answered whole (status %d, %v)", r.id, r.status, r.err)
		case fault.beforeResponse() && r.method == "POST" && (r.status != 502 || !strings.Contains(r.proxy, "connection_terminated")):
			t.Errorf("id %d: POST failed before the response: client got %d %q %v, want 502 connection_terminated", r.id, r.status, r.proxy, r.err)
		case fault == noFault && !ok:
			t.Errorf("id %d (%s): no fault, yet the client got %d, %d bytes, %v", r.id, r.method, r.status, len(r.body), r.err)
		}
		switch {
		case ok:
			counts["whole"]++
		case r.err != nil:
			counts["cut"]++
		default:
			counts[strconv.Itoa(r.status)]++
		}
		if fault != noFault {
			counts[fmt.Sprintf("fault %d", fault)]++
		}
	}
	t.Logf("%d requests: %v", len(results), counts)
}

// soakDo sends r on nc and reads its response whole, recording it in r. It
// reports whether the connection may carry another request.
func soakDo(nc net.Conn, br *bufio.Reader, r *soakRequest) bool {
	te := "length"
	if r.chunked {
		te = "chunked"
	}
	target := fmt.Sprintf("/o?id=%d&size=%d&te=%s", r.id, r.size, te)
	version := "HTTP/1.1"
	if r.http10 {
		version = "HTTP/1.0"
	}
	var req []byte
	req = fmt.Appendf(req, "%s %s %s\r\nHost: soak\r\n", r.method, target, version)
	if r.method == "POST" {
		body := soakBody(r.id, 512)
		req = fmt.Appendf(req, "Content-Length: %d\r\n\r\n", len(body))
		req = append(req, body...)
	} else {
		req = append(req, "\r\n"...)
	}
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write(req); err != nil {
		r.err = err
		return false
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		r.err = err
		return false
	}
	r.status = resp.StatusCode
	r.proxy = resp.Header.Get("Proxy-Status")
	r.body, r.err = io.ReadAll(resp.Body)
	resp.Body.Close()
	return r.err == nil && !resp.Close && !r.http10
}

// soakDoH2 sends r as a stream of c and reads its response whole,
// recording it in r.
func soakDoH2(c *H2Client, r *soakRequest) {
	te := "length"
	if r.chunked {
		te = "chunked"
	}
	var body io.Reader
	if r.method == "POST" {
		// Opaque to net/http: no GetBody, so nothing could rewind it.
		body = io.MultiReader(bytes.NewReader(soakBody(r.id, 512)))
	}
	req, err := http.NewRequest(r.method, fmt.Sprintf("http://soak/o?id=%d&size=%d&te=%s", r.id, r.size, te), body)
	if err != nil {
		r.err = err
		return
	}
	if body != nil {
		req.ContentLength = 512
	}
	resp, err := c.RoundTrip(req)
	if err != nil {
		r.err = err
		return
	}
	r.status = resp.StatusCode
	r.proxy = resp.Header.Get("Proxy-Status")
	r.body, r.err = io.ReadAll(resp.Body)
	resp.Body.Close()
}
