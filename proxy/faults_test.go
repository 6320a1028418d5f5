package proxy

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// faultCounter is an Observer that counts client faults by stage and kind.
type faultCounter struct {
	mu     sync.Mutex
	faults map[string]int // "stage kind"
}

func (f *faultCounter) Try(*Session, *Attempt)       {}
func (f *faultCounter) Done(*Session)                {}
func (f *faultCounter) BudgetDenied(*Session, *Peer) {}
func (f *faultCounter) count(stage, kind string) int { return f.snapshot()[stage+" "+kind] }
func (f *faultCounter) total() (n int)               { return sumValues(f.snapshot()) }
func sumValues(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

func (f *faultCounter) ClientFault(stage ClientStage, e *fault.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.faults == nil {
		f.faults = map[string]int{}
	}
	f.faults[stage.String()+" "+e.Kind.String()]++
}

func (f *faultCounter) snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]int{}
	for k, v := range f.faults {
		m[k] = v
	}
	return m
}

var _ ClientFaultObserver = (*faultCounter)(nil)

// infoLog makes the server's error log an info-level one into the
// harness's buffer (the harness logs at debug, where every fault has a
// line).
func infoLog(hs **harness) func(*Server) {
	return func(s *Server) {
		s.ErrorLog = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) { return (*hs).errors.Write(p) }), nil))
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

// N request heads that time out make N client faults, every one counted,
// and a few lines in the error log, which say how many they left out;
// normal requests are served meanwhile.
func TestHeaderTimeoutsCountedLogSampled(t *testing.T) {
	const n = 200
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	obs := &faultCounter{}
	var hs *harness
	hs = start(t, peers(testOptions(), up.Addr()), infoLog(&hs), func(s *Server) {
		s.HeaderTimeout = 300 * time.Millisecond
		s.Observer = obs
	})
	begin := time.Now()
	statuses := make(chan int, n)
	for i := 0; i < n; i++ {
		c := hs.dial(t)
		c.send("GET /slow HTTP/1.1\r\nHo")
		go func() {
			resp, err := http1Status(c.br)
			if err != nil {
				resp = -1
			}
			statuses <- resp
		}()
	}
	if code, body := hs.get(t, "/"); code != 200 || body != "ok" {
		t.Fatalf("a normal request beside the slow heads: %d %q", code, body)
	}
	for i := 0; i < n; i++ {
		if s := <-statuses; s != 408 {
			t.Fatalf("a slow head got %d, want 408", s)
		}
	}
	wait.For(t, "every fault counted", func() bool { return obs.total() >= n })
	elapsed := time.Since(begin)
	if got := obs.count("head", "client_timeout"); got != n || obs.total() != n {
		t.Fatalf("faults counted: %v, want %d head client_timeout", obs.snapshot(), n)
	}

	// Every fault is a line or is told as left out, within a second.
	var log string
	var lines, leftOut int
	wait.For(t, "the faults left out to be told", func() bool {
		log = hs.errors.String()
		lines, leftOut = strings.Count(log, `msg="client fault"`), 0
		for _, m := range regexp.MustCompile(`left_out=(\d+)`).FindAllStringSubmatch(log, -1) {
			k, _ := strconv.Atoi(m[1])
			leftOut += k
		}
		return lines+leftOut >= n
	})
	if lines+leftOut != n {
		t.Fatalf("%d lines and %d left out, for %d faults:\n%s", lines, leftOut, n, log)
	}
	// logLinesPerSecond and a line telling what was left out, in each
	// second begun, as the sampler counts them.
	all := strings.Count(log, "\n")
	bound := (logLinesPerSecond + 1) * (int(math.Ceil(elapsed.Seconds())) + 1)
	if lines == 0 || all > bound {
		t.Fatalf("%d lines in %v for %d faults, want 1 to %d:\n%s", all, elapsed, n, bound, log)
	}
	if strings.Contains(log, "level=ERROR") || strings.Contains(log, "level=WARN") {
		t.Fatalf("client faults logged as sluice's or an upstream's:\n%s", log)
	}
}

// A client that goes away in the middle of its request body fails the try,
// but that is the client's fault, not the upstream's: it is counted as
// one, and never logged as a failed upstream try.
func TestClientGoneMidBodyIsNoUpstreamFailure(t *testing.T) {
	halfUp := make(chan struct{}, 1)
	up := upstreamtest.StartStreaming(t, func(c *upstreamtest.Conn, r *upstreamtest.Request, body io.Reader) {
		if _, err := io.ReadFull(body, make([]byte, 4)); err == nil {
			halfUp <- struct{}{}
		}
		io.Copy(io.Discard, body) // waits for the whole body, which never comes
	})
	obs := &faultCounter{}
	var hs *harness
	hs = start(t, peers(testOptions(), up.Addr()), infoLog(&hs), func(s *Server) { s.Observer = obs })
	c := hs.dial(t)
	c.send("PUT /f HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhalf")
	<-halfUp // the body is on its way
	c.nc.(*net.TCPConn).CloseWrite()
	if !c.closed(5 * time.Second) {
		t.Fatal("the connection stayed open")
	}
	wait.For(t, "the fault counted", func() bool { return obs.total() == 1 })
	if got := obs.count("body", "client_closed"); got != 1 {
		t.Fatalf("faults: %v, want one body client_closed", obs.snapshot())
	}
	log := hs.errors.String()
	if strings.Contains(log, "upstream try failed") || strings.Contains(log, "level=ERROR") {
		t.Fatalf("the client's fault was logged as the upstream's:\n%s", log)
	}
	if !strings.Contains(log, `msg="client fault"`) || !strings.Contains(log, "stage=body") {
		t.Fatalf("no client-fault line:\n%s", log)
	}
}

// The sampler lets logLinesPerSecond through per second and tells the next
// line let through how many it left out.
func TestLogSampler(t *testing.T) {
	var ls logSampler
	t0 := time.Unix(1000, 0)
	for i := 0; i < logLinesPerSecond; i++ {
		if ok, left, _ := ls.take(t0); !ok || left != 0 {
			t.Fatalf("line %d: %v, %d left out", i, ok, left)
		}
	}
	for i := 0; i < 7; i++ {
		ok, _, report := ls.take(t0.Add(999 * time.Millisecond))
		if ok {
			t.Fatal("a line past the second's budget was let through")
		}
		if want := time.Duration(0); i == 0 {
			if report != time.Millisecond {
				t.Fatalf("the first line left out asks for a report in %v, want 1ms (the second's end)", report)
			}
		} else if report != want {
			t.Fatalf("line %d left out asks for another report", i)
		}
	}
	if ok, left, _ := ls.take(t0.Add(time.Second)); !ok || left != 7 {
		t.Fatalf("next second's first line: %v, %d left out; want true, 7", ok, left)
	}
	if n := ls.flush(); n != 0 {
		t.Fatalf("flush after a line told them: %d left out", n)
	}
	for i := 0; i < logLinesPerSecond+1; i++ { // one of the second's lines went above
		ls.take(t0.Add(time.Second))
	}
	if n := ls.flush(); n != 2 {
		t.Fatalf("flush: %d left out, want 2", n)
	}
}

// http1Status reads one response and returns its status.
func http1Status(br *bufio.Reader) (int, error) { return readResponse(br, "GET") }

// Client faults past logLinesPerSecond in a second are left out of the
// log, and told in a line of their own when the second ends with no line
// after them: at the end of that second, to the nanosecond, on synctest's
// clock.
func TestClientFaultsLeftOutToldAtTheSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log logBuffer
		srv := &Server{ErrorLog: slog.New(slog.NewTextHandler(&log, nil))}
		e := &fault.Error{Kind: fault.ClientTimeout, Source: fault.Downstream, Context: "reading the request head"}
		const n = 12
		for range n {
			srv.clientFault(nil, "192.0.2.1", InHead, e)
		}
		if got := strings.Count(log.String(), `msg="client fault"`); got != logLinesPerSecond {
			t.Fatalf("%d lines for %d faults in a second, want %d:\n%s", got, n, logLinesPerSecond, log.String())
		}
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if strings.Contains(log.String(), "left_out") {
			t.Fatalf("the faults left out told before the second ended:\n%s", log.String())
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		want := fmt.Sprintf(`msg="client faults left out of the log" left_out=%d`, n-logLinesPerSecond)
		if !strings.Contains(log.String(), want) {
			t.Fatalf("no line %q at the second's end:\n%s", want, log.String())
		}
	})
}
