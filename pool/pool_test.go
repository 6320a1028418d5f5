package pool

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/wait"
)

// pair returns a client connection to a loopback listener and the server's
// end of it.
func pair(t *testing.T, ln net.Listener) (client, server net.Conn) {
	t.Helper()
	c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// listenUnix listens on a Unix domain socket in a new directory under
// os.TempDir() (t.TempDir()'s paths can be too long for a socket).
func listenUnix(t *testing.T) net.Listener {
	dir, err := os.MkdirTemp("", "pl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestUnixSocket: a connection to a Unix domain socket that its peer
// closes while idle is removed by the watcher (or found dead by the check
// before use), and the check tells an open one from a closed one, as over
// TCP.
func TestUnixSocket(t *testing.T) {
	ln := listenUnix(t)
	p := New(0, nil)
	defer p.Close()
	c, s := pair(t, ln)
	pc := NewConn(c, "unix:x", &Limits{MaxIdle: 1}, time.Now())
	if !pc.sys.alive() {
		t.Fatal("open connection reported dead")
	}
	p.Put(pc)
	s.Close()
	waitClosed(t, p, pc)
	if got := p.Get("unix:x", nil); got != nil {
		t.Fatal("a connection closed by its peer was handed out")
	}
	st := p.Stats()
	if st.Watched+st.Stale != 1 || (runtime.GOOS == "linux" && st.Watched != 1) {
		t.Fatalf("stats %+v: want the watcher to have removed it", st)
	}
	c2, s2 := pair(t, ln)
	pc2 := NewConn(c2, "unix:x", &Limits{MaxIdle: 1}, time.Now())
	s2.Close()
	wait.For(t, "the check to see the close", func() bool { return !pc2.sys.alive() })
}

// waitClosed waits until the pool can know that pc's peer closed it: on
// Linux, until the watcher removed it; elsewhere, with no watcher, until
// the check before use sees the close.
func waitClosed(t *testing.T, p *Pool, pc *Conn) {
	t.Helper()
	if runtime.GOOS == "linux" {
		wait.For(t, "the watcher to remove the connection", func() bool { return p.Stats().Watched == 1 })
		return
	}
	wait.For(t, "the close to reach the socket", func() bool { return !pc.sys.alive() })
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// putNew puts n new connections for key into p, oldest first, and returns
// them in that order.
func putNew(t *testing.T, p *Pool, ln net.Listener, key string, l *Limits, n int) []*Conn {
	t.Helper()
	var conns []*Conn
	for i := 0; i < n; i++ {
		c, _ := pair(t, ln)
		pc := NewConn(c, key, l, time.Now())
		conns = append(conns, pc)
		p.Put(pc)
	}
	return conns
}

func TestGetReturnsMostRecentFirst(t *testing.T) {
	ln := listen(t)
	p := New(0, nil)
	defer p.Close()
	conns := putNew(t, p, ln, "a", &Limits{MaxIdle: 4, IdleTimeout: time.Minute}, 3)
	if s := p.Stats(); s.Idle != 3 {
		t.Fatalf("%d pooled, want 3", s.Idle)
	}
	for i := 2; i >= 0; i-- {
		if got := p.Get("a", nil); got != conns[i] {
			t.Fatalf("Get #%d returned the wrong connection", 3-i)
		}
	}
	if p.Get("a", nil) != nil || p.Get("b", nil) != nil {
		t.Fatal("empty pool returned a connection")
	}
	if s := p.Stats(); s.Hits != 3 || s.Misses != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPeerCloseWhileIdle(t *testing.T) {
	for _, reset := range []bool{false, true} {
		ln := listen(t)
		p := New(0, nil)
		c, s := pair(t, ln)
		pc := NewConn(c, "a", &Limits{MaxIdle: 1}, time.Now())
		p.Put(pc)
		if reset {
			s.(*net.TCPConn).SetLinger(0)
		}
		s.Close()
		// The watcher removes it without anyone asking (on Linux); the
		// check before use catches it elsewhere. Either way Get never
		// hands it out.
		waitClosed(t, p, pc)
		if got := p.Get("a", nil); got != nil {
			t.Fatalf("reset=%v: a connection closed by its peer was handed out", reset)
		}
		st := p.Stats()
		if st.Watched+st.Stale != 1 || st.Idle != 0 {
			t.Fatalf("reset=%v: stats %+v", reset, st)
		}
		if runtime.GOOS == "linux" && st.Watched != 1 {
			t.Fatalf("reset=%v: the idle watcher did not remove the connection: %+v", reset, st)
		}
		p.Close()
	}
}

func TestCheckBeforeUse(t *testing.T) {
	ln := listen(t)
	c, s := pair(t, ln)
	pc := NewConn(c, "a", &Limits{MaxIdle: 1}, time.Now())
	if !pc.sys.alive() {
		t.Fatal("open connection reported dead")
	}
	s.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n"))
	wait.For(t, "the check to see the unsolicited bytes", func() bool { return !pc.sys.alive() })
	// A read deadline left from the connection's last response (its
	// response-header or read timeout) may pass while it idles; the check
	// must still look at the socket, not report the deadline.
	c3, _ := pair(t, ln)
	pc3 := NewConn(c3, "a", &Limits{MaxIdle: 1}, time.Now())
	c3.SetReadDeadline(time.Now().Add(-time.Second))
	if !pc3.sys.alive() {
		t.Fatal("open connection with a past read deadline reported dead")
	}
	c2, s2 := pair(t, ln)
	pc2 := NewConn(c2, "a", &Limits{MaxIdle: 1}, time.Now())
	s2.Close()
	wait.For(t, "the check to see the close", func() bool { return !pc2.sys.alive() })
}

func TestLimits(t *testing.T) {
	ln := listen(t)
	clk := &fakeClock{now: time.Unix(1000, 0)}
	p := New(3, clk.Now)
	defer p.Close()
	l := &Limits{MaxIdle: 2, IdleTimeout: 10 * time.Second, MaxRequests: 5, MaxAge: time.Hour}
	put := func(key string, served int) *Conn {
		c, _ := pair(t, ln)
		pc := NewConn(c, key, l, clk.Now())
		pc.Served = served
		p.Put(pc)
		return pc
	}
	// Per-key limit: the third connection for "a" pushes out the oldest.
	put("a", 1)
	put("a", 1)
	put("a", 1)
	if s := p.Stats(); s.Idle != 2 || s.Evicted != 1 {
		t.Fatalf("per-key limit: %+v", s)
	}
	// Overall limit: 3 in all.
	put("b", 1)
	newest := put("b", 1)
	if s := p.Stats(); s.Idle != 3 || s.Evicted != 2 {
		t.Fatalf("overall limit: %+v", s)
	}
	// A lower overall limit (a reload's) closes the least recently used
	// at once, "a"'s last then "b"'s first; a higher one lets more in.
	p.SetMaxTotal(1)
	if s := p.Stats(); s.Idle != 1 || s.Evicted != 4 {
		t.Fatalf("overall limit lowered to 1: %+v", s)
	}
	if got := p.Get("b", nil); got != newest {
		t.Fatalf("after lowering the limit, Get(b) = %v, want the most recent connection", got)
	}
	p.SetMaxTotal(3)
	put("e", 1)
	put("e", 1)
	if s := p.Stats(); s.Idle != 2 || s.Evicted != 4 {
		t.Fatalf("overall limit raised to 3: %+v", s)
	}
	// max_requests retires.
	if put("c", 5); p.Stats().Retired != 1 {
		t.Fatal("connection at max_requests was pooled")
	}
	// A learned Keep-Alive max retires too.
	c, _ := pair(t, ln)
	pc := NewConn(c, "d", l, clk.Now())
	pc.Served, pc.MaxServed = 2, 2
	if p.Put(pc) {
		t.Fatal("connection at its learned max was pooled")
	}
	// Idle timeout, at Get time.
	clk.Add(11 * time.Second)
	if p.Get("a", nil) != nil {
		t.Fatal("expired connection handed out")
	}
	// A non-idempotent request refuses a connection idle too long.
	fresh := put("e", 1)
	clk.Add(3 * time.Second)
	if p.Get("e", &Once{Mode: Reuse, MaxIdle: 2 * time.Second}) != nil {
		t.Fatal("connection idle 3s given to a request that allows 2s")
	}
	if p.Get("e", &Once{Mode: Reuse, MaxIdle: 5 * time.Second}) != fresh {
		t.Fatal("connection idle 3s refused to a request that allows 5s")
	}
	// A learned idle limit expires a connection sooner than idle_timeout.
	c, _ = pair(t, ln)
	pc = NewConn(c, "f", l, clk.Now())
	pc.IdleLimit = time.Second
	p.Put(pc)
	clk.Add(1500 * time.Millisecond)
	if p.Get("f", nil) != nil {
		t.Fatal("connection past its learned idle limit handed out")
	}
}

func TestNoPooling(t *testing.T) {
	ln := listen(t)
	p := New(0, nil)
	defer p.Close()
	c, _ := pair(t, ln)
	if p.Put(NewConn(c, "a", &Limits{MaxIdle: 0}, time.Now())) {
		t.Fatal("max_idle 0 pooled a connection")
	}
}

func TestClosingWindowOnlyForRecyclingServers(t *testing.T) {
	ln := listen(t)
	clk := &fakeClock{now: time.Unix(1000, 0)}
	p := New(0, clk.Now)
	defer p.Close()
	l := &Limits{MaxIdle: 8, IdleTimeout: time.Minute}
	put := func() *Conn {
		c, _ := pair(t, ln)
		pc := NewConn(c, "a", l, clk.Now())
		p.Put(pc)
		return pc
	}
	old := put()
	clk.Add(time.Millisecond)
	// A server that closes one connection after its request limit
	// (nginx's keepalive_requests) keeps its other connections in use.
	p.MarkClosing("a")
	if got := p.Get("a", nil); got != old {
		t.Fatal("a connection-limited server's older connection was passed over")
	}
	p.Put(old)
	// Once a connection that predates an announcement dies, the server
	// counts as recycling its processes: older connections are passed
	// over until the window ends.
	dying := put()
	clk.Add(time.Millisecond)
	p.MarkClosing("a")
	p.Get("a", nil) // takes dying (most recent)
	p.Dead(dying)
	if got := p.Get("a", nil); got != nil {
		t.Fatal("a recycling server's pre-announcement connection was handed out")
	}
	fresh := put()
	if got := p.Get("a", nil); got != fresh {
		t.Fatal("a connection opened after the announcement was not handed out")
	}
	p.Put(fresh)
	clk.Add(ClosingWindow)
	if got := p.Get("a", nil); got == nil {
		t.Fatal("after the window, pooled connections are usable again")
	}
	if p.Stats().Closing == 0 {
		t.Fatal("skips not counted")
	}
}

// The per-key limit pushes out the key's least recently used connection,
// and a key's empty list goes at the next sweep.
func TestPerKeyLimitEvictsLeastRecentlyUsed(t *testing.T) {
	ln := listen(t)
	p := New(0, nil)
	defer p.Close()
	conns := putNew(t, p, ln, "a", &Limits{MaxIdle: 2, IdleTimeout: time.Minute}, 3)
	if got := p.Get("a", nil); got != conns[2] {
		t.Fatal("Get did not return the most recently used connection")
	}
	if got := p.Get("a", nil); got != conns[1] {
		t.Fatal("the per-key limit evicted another than the least recently used")
	}
	if p.Get("a", nil) != nil {
		t.Fatal("the evicted connection is still pooled")
	}
	p.Put(conns[1]) // back and out again: the list is reused
	if p.Get("a", nil) != conns[1] {
		t.Fatal("a connection put back was not handed out")
	}
	p.sweep()
	p.mu.Lock()
	keys := len(p.keys)
	p.mu.Unlock()
	if keys != 0 {
		t.Fatalf("%d key lists left after the sweep, want 0", keys)
	}
	if s := p.Stats(); s.Evicted != 1 || s.Idle != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestOnceRules: a request that must be sent once dials under Dial, takes
// a connection under Reuse, and under Learn only once the server has
// answered TrustAfter exchanges since it last dropped a connection such a
// request could have taken; a server seen recycling never earns it.
func TestOnceRules(t *testing.T) {
	ln := listen(t)
	clk := &fakeClock{now: time.Unix(1000, 0)}
	p := New(0, clk.Now)
	defer p.Close()
	l := &Limits{MaxIdle: 8, IdleTimeout: time.Minute}
	learn, dial, reuse := &Once{}, &Once{Mode: Dial}, &Once{Mode: Reuse}
	c, _ := pair(t, ln)
	pc := NewConn(c, "a", l, clk.Now())
	p.Put(pc)
	if p.Get("a", dial) != nil || p.Get("a", learn) != nil {
		t.Fatal("a new server's connection went to a request sent once under dial or learn")
	}
	if p.Stats().Untrusted != 1 {
		t.Fatalf("untrusted %d, want 1", p.Stats().Untrusted)
	}
	if p.Get("a", reuse) != pc {
		t.Fatal("reuse refused a fresh pooled connection")
	}
	// exchanges puts the connection back n times, as n requests would,
	// and leaves it pooled.
	exchanges := func(n int) {
		for i := 0; i < n; i++ {
			p.Put(pc)
			if i < n-1 && p.Get("a", nil) != pc {
				t.Fatal("the connection did not come back")
			}
		}
	}
	exchanges(TrustAfter - 2) // with the one put above: one short
	if p.Get("a", learn) != nil {
		t.Fatalf("trusted after %d exchanges", TrustAfter-1)
	}
	p.Get("a", nil)
	exchanges(1)
	if p.Get("a", learn) != pc {
		t.Fatalf("not trusted after %d exchanges", TrustAfter)
	}
	// A death of a connection idle longer than MaxIdle is the server's
	// idle timeout, which such requests avoid anyway: trust stays.
	p.Put(pc)
	clk.Add(2 * DefaultOnceMaxIdle)
	p.Get("a", nil)
	p.Dead(pc)
	c2, _ := pair(t, ln)
	pc2 := NewConn(c2, "a", l, clk.Now())
	p.Put(pc2)
	if p.Get("a", learn) != pc2 {
		t.Fatal("an idle-timeout death cost the server its trust")
	}
	// A connection dead after a short idle could have been sent a request
	// in vain: the server earns its trust again.
	p.Put(pc2)
	clk.Add(DefaultOnceMaxIdle / 2)
	p.Get("a", nil)
	p.Dead(pc2)
	pc = NewConn(c, "a", l, clk.Now())
	p.Put(pc)
	if p.Get("a", learn) != nil {
		t.Fatal("trusted right after dropping a connection idle less than MaxIdle")
	}
	p.Get("a", nil)
	exchanges(TrustAfter)
	if p.Get("a", learn) != pc {
		t.Fatal("trust not earned again")
	}
	// Recycling: a connection older than an announced close dies within
	// the window. That server never earns trust back.
	clk.Add(time.Millisecond)
	p.MarkClosing("a")
	p.Dead(pc)
	pc = NewConn(c2, "a", l, clk.Now())
	p.Put(pc)
	p.Get("a", nil)
	exchanges(2 * TrustAfter)
	if p.Get("a", learn) != nil {
		t.Fatal("a recycling server's connection went to a request sent once under learn")
	}
}

func TestParseOnceMode(t *testing.T) {
	for _, m := range []OnceMode{Learn, Dial, Reuse} {
		if got, err := ParseOnceMode(m.String()); err != nil || got != m {
			t.Errorf("ParseOnceMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseOnceMode("always"); err == nil {
		t.Error("ParseOnceMode accepted always")
	}
}

func TestIdleByKey(t *testing.T) {
	ln := listen(t)
	p := New(0, nil)
	defer p.Close()
	l := &Limits{MaxIdle: 4, IdleTimeout: time.Minute}
	putNew(t, p, ln, "a", l, 3)
	putNew(t, p, ln, "b", l, 1)
	p.Get("b", nil).Close() // b's list stays, empty, until the sweep
	got := map[string]int{}
	p.IdleByKey(func(key string, idle int) { got[key] = idle })
	if len(got) != 1 || got["a"] != 3 {
		t.Fatalf("IdleByKey reported %v, want a: 3", got)
	}
}
