package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/proxy/internal/spare"
)

// shedCount is an Observer that counts the clients turned away at accept.
type shedCount struct {
	mu sync.Mutex
	n  int
}

func (o *shedCount) Try(*Session, *Attempt)       {}
func (o *shedCount) Done(*Session)                {}
func (o *shedCount) BudgetDenied(*Session, *Peer) {}
func (o *shedCount) Shed(n int, err error)        { o.mu.Lock(); o.n += n; o.mu.Unlock() }
func (o *shedCount) count() int                   { o.mu.Lock(); defer o.mu.Unlock(); return o.n }

var _ ShedObserver = (*shedCount)(nil)

// TestShedAnswersWaitingClients: when accept fails for want of
// descriptors, the accept loop's spare descriptor lets it answer each
// waiting client 503 proxy_internal_error and close the connection cleanly
// (a FIN after the answer, not a reset), and it holds the spare again
// afterwards. The descriptor shortage itself is made in a child process by
// cmd/sluice's TestRunOutOfDescriptors; here shed is called as the accept
// loop calls it after EMFILE.
func TestShedAnswersWaitingClients(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var errs logBuffer
	obs := &shedCount{}
	srv := &Server{ErrorLog: slog.New(slog.NewTextHandler(&errs, nil)), Observer: obs}
	sp := spare.Hold()
	defer sp.Release()
	if !sp.Held() {
		t.Fatal("no spare descriptor held")
	}

	// Without a spare there is nothing to answer with: the accept loop
	// backs off as before.
	if n := srv.shed(ln, &spare.Spare{}, shedAnswer, syscall.EMFILE, &logSampler{}); n != 0 {
		t.Fatalf("shed without a spare descriptor answered %d clients", n)
	}

	const clients = 3
	answers := make(chan string, clients)
	for i := range clients {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			io.WriteString(nc, "GET /"+strings.Repeat("x", i*3000)+" HTTP/1.1\r\nHost: a\r\n\r\n")
			br := bufio.NewReader(nc)
			resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
			if err != nil {
				answers <- err.Error()
				return
			}
			body, _ := io.ReadAll(resp.Body)
			// The connection ends with a FIN: nothing after the answer,
			// and no reset.
			_, err = br.ReadByte()
			answers <- strings.Join([]string{resp.Status, resp.Header.Get("Proxy-Status"),
				strconv.FormatBool(resp.Close), string(body), errString(err)}, " | ")
		}()
	}
	// Each call answers the clients waiting then, as the accept loop's
	// calls do after each accept that failed for want of descriptors.
	shed := 0
	var lines logSampler
	for deadline := time.Now().Add(10 * time.Second); shed < clients && time.Now().Before(deadline); {
		shed += srv.shed(ln, sp, shedAnswer, syscall.EMFILE, &lines)
		if !sp.Held() {
			t.Fatal("the spare descriptor was not held again")
		}
		time.Sleep(time.Millisecond)
	}
	want := `503 Service Unavailable | sluice; error=proxy_internal_error; details="out of file descriptors" | true | ` +
		"503 Service Unavailable (proxy_internal_error)\n | EOF"
	for range clients {
		if got := <-answers; got != want {
			t.Errorf("client got\n%q\nwant\n%q", got, want)
		}
	}
	if n := obs.count(); n != clients || shed != clients {
		t.Errorf("shed answered %d clients, the observer was told of %d; want %d", shed, n, clients)
	}
	if !strings.Contains(errs.String(), "waiting clients answered 503 at accept") {
		t.Errorf("no log line; log:\n%s", errs.String())
	}
}

// TestAcceptFailedWaitsThenSheds: out of descriptors, the accept loop
// leaves a waiting client to wait for one until accepts have failed for
// shedAfter, then answers it 503; it waits at most shedAfter between tries
// meanwhile. Other shortages are waited out with the back-off up to a
// second, and an error that is neither a shortage nor a timeout ends
// Serve.
func TestAcceptFailedWaitsThenSheds(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	obs := &shedCount{}
	srv := &Server{ErrorLog: slog.New(slog.DiscardHandler), Observer: obs}
	st := newAcceptState(shedAnswer)
	defer st.close()
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}

	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")

	// The shortage has just begun: the client waits.
	for range 8 {
		if wait, ok := srv.acceptFailed(ln, st, emfile); !ok || wait > shedAfter {
			t.Fatalf("acceptFailed = %v, %v; want a wait of at most %v", wait, ok, shedAfter)
		}
	}
	if n := obs.count(); n != 0 {
		t.Fatalf("%d clients answered at the start of a shortage", n)
	}
	// It has lasted: the client is answered, as soon as it has arrived.
	st.short = st.short.Add(-shedAfter)
	for deadline := time.Now().Add(10 * time.Second); obs.count() == 0 && time.Now().Before(deadline); {
		srv.acceptFailed(ln, st, emfile)
		time.Sleep(time.Millisecond)
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), &http.Request{Method: "GET"})
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("after %v short of descriptors: %v, %v; want a 503", shedAfter, resp, err)
	}
	// Accepting again ends the shortage.
	st.accepted()
	if !st.short.IsZero() || st.backoff != 0 {
		t.Errorf("after an accept: short since %v, back-off %v", st.short, st.backoff)
	}

	var wait time.Duration
	enomem := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.ENOMEM)}
	for range 10 {
		wait, _ = srv.acceptFailed(ln, st, enomem)
	}
	if wait != time.Second {
		t.Errorf("out of memory, the back-off reached %v; want 1s", wait)
	}
	if _, ok := srv.acceptFailed(ln, st, syscall.EINVAL); ok {
		t.Error("EINVAL was waited out; want Serve to return it")
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// shortListener is a TCP listener whose Accept fails with EMFILE until its
// observer was told of a client turned away: the process out of
// descriptors, as the accept loop sees it. Its socket is the real one, so
// the loop's spare descriptor answers the clients waiting on it.
type shortListener struct {
	*net.TCPListener
	obs *shedCount
}

func (l *shortListener) Accept() (net.Conn, error) {
	if l.obs.count() == 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.TCPListener.Accept()
}

// TestServeShedsWhenOutOfDescriptors: the accept loop answers a client
// waiting while accept fails for want of descriptors 503, with the spare
// descriptor, once the shortage has lasted shedAfter, and serves the next
// client once accept works again.
func TestServeShedsWhenOutOfDescriptors(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("fine"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	obs := &shedCount{}
	hs := start(t, peers(testOptions(), up.Addr()), func(srv *Server) { srv.Observer = obs })
	// start serves a listener of its own; this one is short of descriptors.
	go hs.srv.Serve(&shortListener{ln.(*net.TCPListener), obs})
	hs.addr = ln.Addr().String()

	resp, body := hs.do(t, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp.StatusCode != 503 || resp.Header.Get("Proxy-Status") != `sluice; error=proxy_internal_error; details="out of file descriptors"` || !resp.Close {
		t.Fatalf("while short: %d %q, Proxy-Status %q, close %v; want 503 proxy_internal_error and a close",
			resp.StatusCode, body, resp.Header.Get("Proxy-Status"), resp.Close)
	}
	// The client reads its answer before the loop has counted it (and
	// might answer the next client in the same round).
	waitFor(t, "the client turned away to be counted", func() bool { return obs.count() > 0 })
	if resp, body := hs.do(t, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); resp.StatusCode != 200 || body != "fine" {
		t.Fatalf("after: %d %q, Proxy-Status %q; want 200 from the upstream", resp.StatusCode, body, resp.Header.Get("Proxy-Status"))
	}
	if n := obs.count(); n != 1 {
		t.Errorf("observer told of %d clients turned away, want 1", n)
	}
	for _, line := range []string{"out of file descriptors; clients wait for one", "waiting clients answered 503 at accept"} {
		if n := strings.Count(hs.errors.String(), line); n != 1 {
			t.Errorf("%d lines %q, want 1", n, line)
		}
	}
}

// TestShedClosesTLSClients: on a TLS listener the clients turned away at
// accept are closed without an answer (newAcceptState(nil), as ServeWith
// makes it for TLS): their handshake sees the connection end, not a plain
// 503 it would take for a broken TLS record.
func TestShedClosesTLSClients(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := &Server{ErrorLog: slog.New(slog.NewTextHandler(io.Discard, nil))}
	sp := spare.Hold()
	defer sp.Release()
	site := newSite(t)
	failed := make(chan error, 1)
	go func() {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			failed <- err
			return
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		failed <- tls.Client(nc, site.client()).Handshake()
	}()
	var lines logSampler
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if srv.shed(ln, sp, nil, syscall.EMFILE, &lines) == 1 {
			break
		}
	}
	err = <-failed
	var rhe tls.RecordHeaderError
	if !errors.Is(err, io.EOF) || errors.As(err, &rhe) {
		t.Errorf("the TLS client's handshake: %v, want the end of the connection", err)
	}
}
