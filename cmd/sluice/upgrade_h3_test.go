//go:build linux

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// h3Load drives GETs over HTTP/3 at url from clients that honour GOAWAY
// (quic-go's http3.Transport: it opens no request on a connection past
// its GOAWAY, and sends a request again on a new connection when it was
// refused as not processed, H3_REQUEST_REJECTED), some keeping their
// connection, some opening a new one for each request, some asking for
// url+"slow", which the upstream answers late, until stopped. It counts
// what they got and how long they took.
type h3Load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	latencies  []time.Duration
	conns      []*quic.Conn // every client connection
	stop       chan struct{}
	wg         sync.WaitGroup
}

func startH3Load(url string, tlsConf *tls.Config, keepAlive, fresh, slow int) *h3Load {
	l := &h3Load{stop: make(chan struct{})}
	newClient := func() (*http.Client, *http3.Transport) {
		tr := &http3.Transport{TLSClientConfig: tlsConf.Clone(), QUICConfig: &quic.Config{MaxIdleTimeout: 20 * time.Second},
			Dial: func(ctx context.Context, addr string, tlsConf *tls.Config, conf *quic.Config) (*quic.Conn, error) {
				qc, err := quic.DialAddrEarly(ctx, addr, tlsConf, conf)
				if err == nil {
					l.mu.Lock()
					l.conns = append(l.conns, qc)
					l.mu.Unlock()
				}
				return qc, err
			}}
		return &http.Client{Transport: tr, Timeout: 15 * time.Second}, tr
	}
	run := func(keep bool, url string) {
		defer l.wg.Done()
		c, tr := newClient()
		defer func() { tr.Close() }()
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			if !keep {
				tr.Close()
				c, tr = newClient()
			}
			start := time.Now()
			resp, err := c.Get(url)
			if err == nil {
				var body []byte
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && (resp.StatusCode != 200 || string(body) != "ok") {
					err = fmt.Errorf("status %d, body %q, Proxy-Status %q", resp.StatusCode, body, resp.Header.Get("Proxy-Status"))
				}
			}
			d := time.Since(start)
			l.mu.Lock()
			l.latencies = append(l.latencies, d)
			if err != nil && len(l.errs) < 20 {
				// When it began and its id, to find it in sluice's log.
				id := ""
				if resp != nil {
					id = " " + resp.Header.Get("X-Request-Id")
				}
				l.errs = append(l.errs, fmt.Sprintf("GET %s%s from %s, after %v: %v",
					url, id, start.Format("15:04:05.000"), d.Round(time.Millisecond), err))
			}
			l.mu.Unlock()
			if err != nil {
				l.failed.Add(1)
				continue
			}
			l.ok.Add(1)
		}
	}
	for range keepAlive {
		l.wg.Add(1)
		go run(true, url)
	}
	for range fresh {
		l.wg.Add(1)
		go run(false, url)
	}
	for range slow {
		l.wg.Add(1)
		go run(true, url+"slow")
	}
	return l
}

func (l *h3Load) end() {
	select {
	case <-l.stop:
		return
	default:
	}
	close(l.stop)
	l.wg.Wait()
}

// lost returns the packets the clients sent that were declared lost, and
// those they sent, on all their connections.
func (l *h3Load) lost() (lost, sent uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, qc := range l.conns {
		s := qc.ConnectionStats()
		lost += s.PacketsLost
		sent += s.PacketsSent
	}
	return lost, sent
}

// quantile returns the latency at quantile q (0..1) of the requests so far.
func (l *h3Load) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slices.Clone(l.latencies)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// waitOK waits until n more requests have succeeded, or fails the test
// once too many failed.
func (l *h3Load) waitOK(t *testing.T, n int64) {
	t.Helper()
	target := l.ok.Load() + n
	if !wait.Until(60*time.Second, func() bool { return l.ok.Load() >= target || l.failed.Load() > 50 }) || l.failed.Load() > 50 {
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Fatalf("%d requests ok, %d failed, waiting for %d: %v", l.ok.Load(), l.failed.Load(), target, l.errs)
	}
}

// TestUpgradeH3UnderLoad builds sluice, runs it with a listener serving
// HTTP/3, and upgrades it three times (USR2 twice, then sluice upgrade)
// while clients that honour
// GOAWAY send requests over HTTP/3, on kept connections, on a new
// connection each, and slow ones that keep the old process draining: no
// request fails, and no packet of the clients is lost (on loopback, a
// packet is lost when it reaches the process that does not hold its
// connection); each old process passed datagrams on to its successor.
func TestUpgradeH3UnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := buildSluice(t, dir, "sluice", "v1")
	// /slow is held until the test lets it go, right after each upgrade:
	// requests under way keep the old process draining while the new one
	// takes new connections. At the end the gate stays open.
	var gateMu sync.Mutex
	gate, gateOpen := make(chan struct{}), false
	release := func(last bool) {
		gateMu.Lock()
		defer gateMu.Unlock()
		if gateOpen {
			return
		}
		close(gate)
		if gateOpen = last; !last {
			gate = make(chan struct{})
		}
	}
	up := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		if r.Target == "/slow" {
			gateMu.Lock()
			g := gate
			gateMu.Unlock()
			<-g
		}
		c.Respond(200, "ok")
	})
	addr, first, ca, log := startH3(t, dir, bin, up.Addr())
	tlsConf := &tls.Config{RootCAs: ca.Pool(), ServerName: "example.com"}
	l := startH3Load("https://"+addr+"/", tlsConf, 6, 3, 3)
	defer l.end()
	defer release(true) // before the load ends: its slow clients wait on the gate
	l.waitOK(t, 300)
	upgraded := regexp.MustCompile(`msg="binary upgrade: the new process serves; draining" pid=(\d+)`)
	old := first
	for i := 1; i <= 3; i++ {
		if i < 3 {
			syscall.Kill(old, syscall.SIGUSR2)
		} else {
			var out strings.Builder
			if code := run([]string{"upgrade", "-c", filepath.Join(dir, "sluice.yaml")}, &out, &out); code != 0 {
				t.Fatalf("sluice upgrade: exit %d: %s", code, out.String())
			}
		}
		m := log.wait(t, "upgrade", upgraded, i)
		release(false) // the old process's slow requests finish as it drains
		next, _ := strconv.Atoi(m[i-1][1])
		l.waitOK(t, 100)
		waitExited(t, old, log)
		l.waitOK(t, 300)
		old = next
	}
	release(true)
	l.end()
	if n := l.failed.Load(); n > 0 {
		t.Errorf("%d of %d requests over HTTP/3 failed during the upgrades: %v\nlog:\n%s", n, n+l.ok.Load(), l.errs, log.buf.String())
	}
	// Latencies are for the log: a loaded machine slows any request.
	p50, p999, worst := l.quantile(0.5), l.quantile(0.999), l.quantile(1)
	lost, sent := l.lost()
	t.Logf("%d requests over HTTP/3 across three upgrades, %d failed; latency p50 %v, p99.9 %v, max %v; the clients' packets lost: %d of %d",
		l.ok.Load(), l.failed.Load(), p50, p999, worst, lost, sent)
	// On loopback a packet is lost only when it goes to the process that
	// does not hold its connection (or a socket's buffer overflows).
	if lost > 0 {
		t.Errorf("%d of the clients' %d packets were lost", lost, sent)
	}
	// Each old process passed datagrams on to its successor while it
	// drained.
	passed := regexp.MustCompile(`msg="HTTP/3: datagrams passed on to the new process while draining" address=\S+ datagrams=(\d+)`).FindAllStringSubmatch(log.buf.String(), -1)
	if len(passed) != 3 {
		t.Errorf("%d old processes passed datagrams on, want 3:\n%s", len(passed), log.buf.String())
	}
	for _, m := range passed {
		t.Logf("an old process passed %s datagrams on to its successor while it drained", m[1])
	}
	syscall.Kill(old, syscall.SIGTERM)
	select {
	case <-log.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice did not stop 30 s after TERM:\n%s", log.buf.String())
	}
}

// TestUpgradeH3DrainsFirst: once the old process of an upgrade says it
// drains, it takes no new request on its HTTP/3 connections (GOAWAY went
// first), not even while it still waits for a handshake begun there,
// which here never completes (quic-go gives it up after seconds): a
// request it took then would count against its drain timeout, the wait
// for the handshake too. The request on its kept connection is refused,
// never processed; sent on a new connection, it is served by the new
// process.
func TestUpgradeH3DrainsFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := buildSluice(t, dir, "sluice", "v1")
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	addr, old, ca, log := startH3(t, dir, bin, up.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	tlsConf := &tls.Config{RootCAs: ca.Pool(), ServerName: "example.com", NextProtos: []string{http3.NextProtoH3}}

	// A connection kept across the upgrade, served by the old process.
	kept, err := quic.DialAddr(ctx, addr, tlsConf, &quic.Config{MaxIdleTimeout: processTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer kept.CloseWithError(0, "")
	cc := (&http3.Transport{}).NewClientConn(kept)
	get := func(rt http.RoundTripper, target string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+addr+target, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, err
	}
	if code, err := get(cc, "/before"); err != nil || code != 200 {
		t.Fatalf("before the upgrade: %d %v", code, err)
	}

	// A handshake under way at the old process as the upgrade hands over,
	// which it waits for before it stops taking new connections.
	halfHandshake(t, ctx, addr, tlsConf)

	syscall.Kill(old, syscall.SIGUSR2)
	m := log.wait(t, "upgrade", regexp.MustCompile(`msg="binary upgrade: the new process serves; draining" pid=(\d+)`), 1)
	next, _ := strconv.Atoi(m[0][1])
	if code, err := get(cc, "/late"); err == nil {
		t.Errorf("the old process took a request after it said it drains: status %d", code)
	} else {
		t.Logf("the request on the old process's connection, refused: %v", err)
	}
	waitExited(t, old, log)
	for _, r := range up.Requests() {
		if r.Target == "/late" {
			t.Error("the old process sent upstream a request it took after it said it drains")
		}
	}
	// Sent again, on a new connection: the new process serves it.
	tr := &http3.Transport{TLSClientConfig: tlsConf}
	defer tr.Close()
	if code, err := get(tr, "/late"); err != nil || code != 200 {
		t.Errorf("the refused request sent again: %d %v", code, err)
	}
	syscall.Kill(next, syscall.SIGTERM)
	select {
	case <-log.done:
	case <-time.After(processTimeout):
		t.Fatalf("sluice did not stop %v after TERM:\n%s", processTimeout, log.buf.String())
	}
}

// halfHandshake begins a QUIC handshake with addr that stays under way
// there: of the client's datagrams only the first reaches addr, half of
// its ClientHello (which a post-quantum key share spreads over two). It
// returns once addr has answered that datagram (an acknowledgement): the
// connection attempt is taken up.
func halfHandshake(t *testing.T, ctx context.Context, addr string, tlsConf *tls.Config) {
	t.Helper()
	server, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	t.Cleanup(func() {
		cancel()
		relay.Close()
		<-done
		<-done
	})
	answered := make(chan struct{})
	go func() {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 64<<10)
		sent := false
		for {
			n, from, err := relay.ReadFromUDP(buf)
			if err != nil {
				return
			}
			switch {
			case from.Port == server.Port && from.IP.Equal(server.IP):
				select {
				case <-answered:
				default:
					close(answered)
				}
			case !sent:
				sent = true
				relay.WriteToUDP(buf[:n], server)
			}
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		conf := tlsConf.Clone()
		conf.CurvePreferences = []tls.CurveID{tls.X25519MLKEM768}
		if qc, err := quic.DialAddr(ctx, relay.LocalAddr().String(), conf, &quic.Config{}); err == nil {
			qc.CloseWithError(0, "")
		}
	}()
	select {
	case <-answered:
	case <-ctx.Done():
		t.Fatal("no answer to the first datagram of a handshake")
	}
}

// startH3 starts bin with dir/sluice.yaml: one TLS listener serving HTTP/3 (and
// HTTP/2 and HTTP/1.1) in front of upstream, a drain timeout of 10 s and a
// pid file, and returns its HTTP/3 address, the pid of the process
// serving, the CA its certificate is from and its log. Whatever process
// the pid file names at the end is killed.
func startH3(t *testing.T, dir, bin, upstream string) (addr string, pid int, ca *tlstest.CA, log *processLog) {
	t.Helper()
	ca = tlstest.NewCA(t, "test CA")
	cert, key := ca.Server(t, "example.com", "127.0.0.1").Write(t, dir, "site")
	path := filepath.Join(dir, "sluice.yaml")
	pidFile := filepath.Join(dir, "sluice.pid")
	config := fmt.Sprintf(`listen:
  - address: 127.0.0.1:0
    tls: {certificates: [{cert: %s, key: %s}]}
    protocols: [h3, h2, http/1.1]
access_log: {enabled: false}
log: {level: info}
timeouts: {drain: 10s}
pid_file: %s
`+upstreamsOf, cert, key, pidFile, upstream)
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	_, log = startSluice(t, bin, path)
	t.Cleanup(func() {
		if pid, err := readPIDFile(pidFile); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	m := log.wait(t, "listening", regexp.MustCompile(`msg=listening address=(127\.0\.0\.1:\d+) .*h3=(127\.0\.0\.1:\d+)`), 1)
	// The pid file is written once the listeners serve, after they log.
	wait.Within(t, processTimeout, "the pid file", func() bool {
		var err error
		pid, err = readPIDFile(pidFile)
		return err == nil
	})
	return m[0][2], pid, ca, log
}
