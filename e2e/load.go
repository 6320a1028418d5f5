package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Result is what a client was told about one request.
type Result struct {
	ID, Method string
	// Status is the response status, 0 when no response arrived.
	Status int
	// ProxyStatus is the response's Proxy-Status field (RFC 9209), which
	// names the error of an answer the proxy made itself.
	ProxyStatus string
	// Body is the response body.
	Body []byte
	// Err is a transport failure (dial, write, read, timeout), or a
	// *MismatchError; a response with any status is not an error.
	Err error
	// Start is when the request was sent; Duration how long it took.
	Start    time.Time
	Duration time.Duration
}

// MismatchError is a response carrying another request's X-Request-Id, or
// none: responses and requests have come apart somewhere.
type MismatchError struct{ Want, Got string }

func (e *MismatchError) Error() string {
	return fmt.Sprintf("response for X-Request-Id %q carried %q", e.Want, e.Got)
}

// Client is one keep-alive client connection to a proxy, written with
// plain sockets so that nothing retries behind the test's back (net/http's
// Transport resends some failed requests on its own). It dials on first use
// and again after the server closed or the connection failed; it never
// sends a request twice. A Client is not safe for concurrent use.
type Client struct {
	// Addr is the proxy's host:port.
	Addr string
	// Timeout bounds each request, dial included; 0 means 10 s.
	Timeout time.Duration

	nc   net.Conn
	br   *bufio.Reader
	wbuf []byte
}

// Do sends one request for path /items/ID with X-Request-Id ID and, when
// body is not nil, the body with Content-Length, and reads the response.
func (c *Client) Do(method, id string, body []byte) (r Result) {
	r = Result{ID: id, Method: method, Start: time.Now()}
	defer func() { r.Duration = time.Since(r.Start) }()
	timeout := orDuration(c.Timeout, 10*time.Second)
	if c.nc == nil {
		nc, err := net.DialTimeout("tcp", c.Addr, timeout)
		if err != nil {
			r.Err = err
			return r
		}
		c.nc = nc
		if c.br == nil {
			c.br = bufio.NewReader(nc)
		} else {
			c.br.Reset(nc)
		}
	}
	c.nc.SetDeadline(time.Now().Add(timeout))

	b := c.wbuf[:0]
	b = append(b, method...)
	b = append(b, " /items/"...)
	b = append(b, id...)
	b = append(b, " HTTP/1.1\r\nHost: e2e.test\r\nX-Request-Id: "...)
	b = append(b, id...)
	b = append(b, "\r\n"...)
	if body != nil {
		b = append(b, "Content-Type: application/octet-stream\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	b = append(b, body...)
	c.wbuf = b
	if _, err := c.nc.Write(b); err != nil {
		r.Err = err
		c.Close()
		return r
	}
	req := &http.Request{Method: method}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		r.Err = err
		c.Close()
		return r
	}
	r.take(resp)
	if r.Err != nil || resp.Close {
		c.Close()
	}
	return r
}

// take records resp, its body read whole, in r: a response that is not
// for r.ID is an error.
func (r *Result) take(resp *http.Response) {
	r.Status = resp.StatusCode
	r.ProxyStatus = resp.Header.Get("Proxy-Status")
	var err error
	r.Body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	switch got := resp.Header.Get("X-Request-Id"); {
	case err != nil:
		r.Err = err
	case got != r.ID && resp.StatusCode < 500:
		// A proxy's own error answer carries no id; an upstream's
		// answer must carry this one.
		r.Err = &MismatchError{Want: r.ID, Got: got}
	}
}

// Close closes the connection, if any; the next Do dials again.
func (c *Client) Close() {
	if c.nc != nil {
		c.nc.Close()
		c.nc = nil
	}
}

// Load is a bounded load of keep-alive clients, each sending its next
// request as soon as the last was answered. Request n (from 0) has the id
// Prefix-n and is a POST with a body when n is even, a GET when n is odd;
// no request carries an Idempotency-Key.
type Load struct {
	// Addr is the proxy's host:port.
	Addr string
	// Clients is the number of concurrent clients; 0 means 16.
	Clients int
	// Requests is the number of requests in all; 0 means 3000.
	Requests int
	// Prefix starts every id; "" means "r".
	Prefix string
	// BodySize is the size of each POST body; 0 means 64 bytes.
	BodySize int
	// Timeout bounds each request; 0 means 10 s.
	Timeout time.Duration
	// H2Conns, when above 0, makes the clients streams of this many
	// HTTP/2 connections (h2c, prior knowledge) instead of HTTP/1.1
	// connections of their own: Clients requests in flight at a time,
	// multiplexed.
	H2Conns int
}

// doer sends one request the way Client.Do does.
type doer interface {
	Do(method, id string, body []byte) Result
}

// Run sends the load and returns one Result per request, in request order.
// When ctx ends, clients stop after their current request; the requests
// never sent have no Method.
func (l Load) Run(ctx context.Context) []Result {
	n := orInt(l.Requests, 3000)
	prefix := l.Prefix
	if prefix == "" {
		prefix = "r"
	}
	results := make([]Result, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var h2 []*H2Client
	for range l.H2Conns {
		h2 = append(h2, &H2Client{Addr: l.Addr, Timeout: l.Timeout})
	}
	for k := range orInt(l.Clients, 16) {
		wg.Go(func() {
			var c doer
			if len(h2) > 0 {
				c = h2[k%len(h2)] // shared: closed once all are done
			} else {
				own := &Client{Addr: l.Addr, Timeout: l.Timeout}
				defer own.Close()
				c = own
			}
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				id := fmt.Sprintf("%s-%05d", prefix, i)
				if i%2 == 0 {
					results[i] = c.Do("POST", id, Body(id, orInt(l.BodySize, 64)))
				} else {
					results[i] = c.Do("GET", id, nil)
				}
			}
		})
	}
	wg.Wait()
	for _, c := range h2 {
		c.Close()
	}
	return results
}

// Body returns a request body of size bytes made from id.
func Body(id string, size int) []byte {
	b := make([]byte, 0, size)
	for len(b) < size {
		b = append(b, id...)
		b = append(b, '\n')
	}
	return b[:size]
}

// Report compares what clients were told with what the upstream processed.
type Report struct {
	// Methods holds one line per method, sorted by name.
	Methods []*MethodReport
	// PIDs is the number of distinct upstream processes seen in the
	// records: with two workers, the recycles are PIDs-2.
	PIDs int
	// Unknown counts records of ids no client sent (probes excluded).
	Unknown int
}

// MethodReport is the part of a Report for one method.
type MethodReport struct {
	Method string
	Sent   int
	// Status counts responses by status.
	Status map[int]int
	// Errors counts transport failures, Mismatched wrong responses.
	Errors, Mismatched int
	// Processed counts ids processed at least once; Duplicated ids
	// processed more than once; Lost ids answered 2xx yet never
	// processed; BodyMismatch ids processed with a body of another size.
	Processed, Duplicated, Lost, BodyMismatch int
	// FailedProcessed counts ids the client was given a 5xx or a
	// transport error for that the upstream processed anyway (the
	// client cannot know it was done); FailedUnprocessed those it did
	// not (a client retry would be safe).
	FailedProcessed, FailedUnprocessed int
	// Bad lists the ids with any of the problems above, for finding them
	// in logs.
	Bad []string
}

// Failed returns the number of 5xx answers and transport errors.
func (m *MethodReport) Failed() int {
	n := m.Errors
	for code, k := range m.Status {
		if code >= 500 {
			n += k
		}
	}
	return n
}

// Tally builds the Report for results and the upstream's records. bodySize
// is the POST body size the load sent (0: not checked).
func Tally(results []Result, records []Record, bodySize int) *Report {
	rep := &Report{}
	counts := make(map[string]int, len(results))
	bodies := make(map[string]int, len(results))
	pids := make(map[int]bool)
	for _, rec := range records {
		pids[rec.PID] = true
		if rec.ID == "-" {
			continue
		}
		counts[rec.ID]++
		bodies[rec.ID] = rec.BodyLen
	}
	rep.PIDs = len(pids)
	byMethod := make(map[string]*MethodReport)
	sent := make(map[string]bool, len(results))
	for i := range results {
		r := &results[i]
		if r.Method == "" {
			continue
		}
		sent[r.ID] = true
		m := byMethod[r.Method]
		if m == nil {
			m = &MethodReport{Method: r.Method, Status: make(map[int]int)}
			byMethod[r.Method] = m
		}
		m.Sent++
		bad := false
		failed := false
		if _, ok := r.Err.(*MismatchError); ok {
			m.Mismatched++
			bad = true
		} else if r.Err != nil {
			m.Errors++
			bad, failed = true, true
		}
		if r.Status != 0 {
			m.Status[r.Status]++
			if r.Status >= 500 {
				bad, failed = true, true
			}
		}
		n := counts[r.ID]
		if n > 0 {
			m.Processed++
		}
		if n > 1 {
			m.Duplicated++
			bad = true
		}
		if r.Err == nil && r.Status >= 200 && r.Status < 300 && n == 0 {
			m.Lost++
			bad = true
		}
		if n > 0 && r.Method == "POST" && bodySize > 0 && bodies[r.ID] != bodySize {
			m.BodyMismatch++
			bad = true
		}
		if failed {
			if n > 0 {
				m.FailedProcessed++
			} else {
				m.FailedUnprocessed++
			}
		}
		if bad {
			m.Bad = append(m.Bad, r.ID)
		}
	}
	for id := range counts {
		if !sent[id] {
			rep.Unknown++
		}
	}
	for _, m := range byMethod {
		rep.Methods = append(rep.Methods, m)
	}
	slices.SortFunc(rep.Methods, func(a, b *MethodReport) int { return strings.Compare(a.Method, b.Method) })
	return rep
}

// Method returns the line for method, or an empty one.
func (r *Report) Method(method string) *MethodReport {
	for _, m := range r.Methods {
		if m.Method == method {
			return m
		}
	}
	return &MethodReport{Method: method, Status: map[int]int{}}
}

// Total returns the sum over methods of f.
func (r *Report) Total(f func(*MethodReport) int) int {
	n := 0
	for _, m := range r.Methods {
		n += f(m)
	}
	return n
}

// Header is the column heading of Line.
const Header = "method  sent  statuses             errors  mismatch  processed  dup  lost  body  5xx/err:processed  5xx/err:unprocessed"

// Line formats m as one table line under Header.
func (m *MethodReport) Line() string {
	return fmt.Sprintf("%-6s  %4d  %-19s  %6d  %8d  %9d  %3d  %4d  %4d  %17d  %19d",
		m.Method, m.Sent, m.Statuses(), m.Errors, m.Mismatched, m.Processed,
		m.Duplicated, m.Lost, m.BodyMismatch, m.FailedProcessed, m.FailedUnprocessed)
}

// Statuses formats the status counts as "200=1499 502=1".
func (m *MethodReport) Statuses() string {
	codes := make([]int, 0, len(m.Status))
	for c := range m.Status {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var b strings.Builder
	for i, c := range codes {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d=%d", c, m.Status[c])
	}
	if b.Len() == 0 {
		return "-"
	}
	return b.String()
}

// String formats the report as a table.
func (r *Report) String() string {
	var b strings.Builder
	b.WriteString(Header)
	b.WriteByte('\n')
	for _, m := range r.Methods {
		b.WriteString(m.Line())
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "upstream processes seen: %d; records of ids never sent: %d", r.PIDs, r.Unknown)
	return b.String()
}
