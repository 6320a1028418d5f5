//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// This file holds what the idempotency tests with sluice processes
// (idempotency_test.go) share: an upstream that creates an order for each
// keyed request it processes and does not deduplicate, a client that
// reads sluice's answers byte for byte, and the processes themselves.

// orderBook is an upstream that creates an order for every keyed POST it
// reads, whatever its key, and records which keys it processed and the
// answer it gave, byte for byte.
type orderBook struct {
	up *upstreamtest.Server
	// delay, when not nil, says how long to wait before the head, and
	// between the first half of the body and the rest: an upstream that
	// answers slowly, at random.
	delay func() (head, body time.Duration)

	mu     sync.Mutex
	orders map[string]*order // by Idempotency-Key
	n      int               // orders created
	// hold, when not nil, holds the answers to keys that start with
	// holdPrefix until it is closed, and arrived is sent each such key
	// as it is processed (see holdKeys).
	arrived    chan string
	hold       chan struct{}
	holdPrefix string
	rng        *rand.Rand
}

// order is what the upstream did with one key.
type order struct {
	times   int    // how many times the key was processed
	attempt string // the X-Attempt of the first request processed
	head    string // its answer's status line and fields, CRLFs included, without the blank line
	body    []byte
}

// startOrders starts an order book; seed makes its answers' padding and
// delays.
func startOrders(t *testing.T, seed uint64, delay func(*rand.Rand) (time.Duration, time.Duration)) *orderBook {
	b := &orderBook{orders: make(map[string]*order), rng: rand.New(rand.NewPCG(seed, 1))}
	if delay != nil {
		b.delay = func() (time.Duration, time.Duration) {
			b.mu.Lock()
			defer b.mu.Unlock()
			return delay(b.rng)
		}
	}
	b.up = upstreamtest.Start(t, b.serve)
	return b
}

func (b *orderBook) serve(c *upstreamtest.Conn, r *upstreamtest.Request) {
	key := r.Get("Idempotency-Key")
	if r.Method != "POST" || key == "" {
		c.Respond(200, "not an order")
		return
	}
	b.mu.Lock()
	b.n++
	n := b.n
	o := b.orders[key]
	if o == nil {
		o = &order{attempt: r.Get("X-Attempt")}
		b.orders[key] = o
	}
	o.times++
	first := o.times == 1
	// An answer of 200 bytes to 24 KiB: some fit one segment, some are
	// relayed in pieces.
	pad := make([]byte, 100+b.rng.IntN(12*1024))
	for i := range pad {
		pad[i] = byte(b.rng.Uint32())
	}
	var hold chan struct{}
	var arrived chan string
	if b.hold != nil && strings.HasPrefix(key, b.holdPrefix) {
		hold, arrived = b.hold, b.arrived
	}
	b.mu.Unlock()

	body := fmt.Appendf(nil, `{"order":%d,"key":%q,"pad":"%s"}`, n, key, hex.EncodeToString(pad))
	head := fmt.Sprintf("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Order: %d\r\nx-MiXed-Case: kept as sent\r\nContent-Length: %d\r\n", n, len(body))
	if first {
		b.mu.Lock()
		o.head, o.body = head, body
		b.mu.Unlock()
	}
	if arrived != nil {
		arrived <- key
	}
	var headDelay, bodyDelay time.Duration
	if b.delay != nil {
		headDelay, bodyDelay = b.delay()
	}
	if !b.wait(c, hold, headDelay) {
		return
	}
	half := len(body) / 2
	c.WriteString(head + "\r\n" + string(body[:half]))
	if !b.wait(c, nil, bodyDelay) {
		return
	}
	c.Write(body[half:])
}

// holdKeys holds the answers to the keys that start with prefix until
// the channel returned is closed, and sends each of them to arrived as
// it is processed; arrived must have room for them.
func (b *orderBook) holdKeys(prefix string, arrived chan string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hold, b.holdPrefix, b.arrived = make(chan struct{}), prefix, arrived
	return b.hold
}

// wait waits for hold to close and d to pass, or the server to close
// (false).
func (b *orderBook) wait(c *upstreamtest.Conn, hold chan struct{}, d time.Duration) bool {
	if hold != nil {
		select {
		case <-hold:
		case <-c.Done():
			return false
		}
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.Done():
		return false
	}
}

// order returns a copy of what the upstream did with key.
func (b *orderBook) order(key string) (order, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.orders[key]
	if !ok {
		return order{}, false
	}
	return *o, true
}

// processed returns how many times each key was processed.
func (b *orderBook) processed() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := make(map[string]int, len(b.orders))
	for k, o := range b.orders {
		m[k] = o.times
	}
	return m
}

// keyedAnswer is an answer as the client read it off the wire.
type keyedAnswer struct {
	status int
	head   string // status line and fields, CRLFs included, without the blank line
	body   []byte
}

// field returns the value of the first field named name (any case), or
// "".
func (a *keyedAnswer) field(name string) string {
	for line := range strings.Lines(a.head) {
		n, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if ok && strings.EqualFold(n, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// upstreamHead returns the head less the fields sluice adds to every
// answer, a replay's included: X-Request-Id (the request's own id) and
// Idempotent-Replayed.
func (a *keyedAnswer) upstreamHead() string {
	var b strings.Builder
	for line := range strings.Lines(a.head) {
		n, _, _ := strings.Cut(line, ":")
		if strings.EqualFold(n, "X-Request-Id") || strings.EqualFold(n, "Idempotent-Replayed") {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// keyedPost sends POST path with key, the attempt's id and body to addr
// on a new connection, and reads the answer, all within timeout: past it,
// the client gives up and closes (a net.Error whose Timeout is true).
func keyedPost(addr, path, key, attempt string, body []byte, timeout time.Duration) (keyedAnswer, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return keyedAnswer{}, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(timeout))
	return keyedRoundTrip(nc, bufio.NewReader(nc), path, key, attempt, body)
}

// keyedRoundTrip writes one keyed POST for path to nc and reads the
// answer from br, which reads nc. The connection may be reused after it
// (the answer has Content-Length).
func keyedRoundTrip(nc net.Conn, br *bufio.Reader, path, key, attempt string, body []byte) (keyedAnswer, error) {
	req := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: shop.test\r\nIdempotency-Key: %s\r\nX-Attempt: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, key, attempt, len(body), body)
	if _, err := nc.Write(req); err != nil {
		return keyedAnswer{}, err
	}
	return readAnswer(br)
}

// readAnswer reads one answer with a Content-Length body, raw.
func readAnswer(br *bufio.Reader) (keyedAnswer, error) {
	var a keyedAnswer
	var head strings.Builder
	length := -1
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return a, fmt.Errorf("reading the head: %w", err)
		}
		if line == "\r\n" {
			break
		}
		if head.Len() == 0 {
			f := strings.Fields(line)
			if len(f) < 2 {
				return a, fmt.Errorf("status line %q", line)
			}
			a.status, _ = strconv.Atoi(f[1])
		} else if n, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(n, "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		head.WriteString(line)
	}
	a.head = head.String()
	if length < 0 {
		return a, fmt.Errorf("an answer without Content-Length:\n%s", a.head)
	}
	a.body = make([]byte, length)
	if _, err := io.ReadFull(br, a.body); err != nil {
		return a, fmt.Errorf("reading the body: %w", err)
	}
	return a, nil
}

// problemType returns the type of an RFC 9457 problem body's, after its
// '#' ("idempotency-key-in-use"), or "".
func problemType(body []byte) string {
	m := regexp.MustCompile(`"type":\s*"[^"#]*#([^"]+)"`).FindSubmatch(body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// sluiceProc is a sluice run process a test started.
type sluiceProc struct {
	name string
	addr string // where its one listener listens
	pid  int
	log  *processLog
}

var listeningRE = regexp.MustCompile(`msg=listening address=(127\.0\.0\.1:\d+)`)

// startProc writes config (which listens on 127.0.0.1:0) to dir/name.yaml,
// runs bin on it, and returns once it listens. The test's cleanup stops
// it (TERM), unless it was killed, and shows its log if the test failed.
func startProc(t *testing.T, bin, dir, name, config string) *sluiceProc {
	t.Helper()
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, log := startSluice(t, bin, path)
	p := &sluiceProc{name: name, pid: cmd.Process.Pid, log: log}
	t.Cleanup(func() {
		if !exited(p.pid) {
			syscall.Kill(p.pid, syscall.SIGTERM)
			waitExited(t, p.pid, log)
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, log.buf.String())
		}
	})
	p.addr = log.wait(t, name+" listening", listeningRE, 1)[0][1]
	return p
}

// kill kills the process with SIGKILL and waits for it to be gone.
func (p *sluiceProc) kill(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, p.pid, p.log)
}

// quantiles returns the q-quantiles of ds (nearest rank), sorted in place.
func quantiles(ds []time.Duration, qs ...float64) []time.Duration {
	slices.Sort(ds)
	out := make([]time.Duration, len(qs))
	if len(ds) == 0 {
		return out
	}
	for i, q := range qs {
		k := int(q*float64(len(ds))+0.999999) - 1
		out[i] = ds[min(max(k, 0), len(ds)-1)]
	}
	return out
}

// sameBytes reports whether an answer is, less sluice's own fields, the
// upstream's order o byte for byte.
func sameBytes(a *keyedAnswer, o *order) bool {
	return a.upstreamHead() == o.head && bytes.Equal(a.body, o.body)
}
