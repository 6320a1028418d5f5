// Command tlsload is bench/compare's load for TLS handshakes: each of -c
// clients in turn dials, makes a TLS handshake, sends one GET with
// Connection: close, reads the response and closes, until -d has passed
// (or, with -n, after n exchanges of its own, whichever comes first).
//
//	tlsload -addr 127.0.0.1:8443 -path /small -c 64 -d 3s [-n 0] [-resume] [-servername bench.test]
//
// Without -resume every handshake is a full one (ECDHE and the server's
// certificate signature); with -resume each client offers the session
// ticket its previous connection was given, as wrk does. wrk cannot be made
// to make full handshakes: it keeps its SSL object's session across
// reconnects (SSL_clear), so its TLS 1.3 connections resume, whatever
// OpenSSL's SessionTicket option says. So bench/compare runs wrk for
// keep-alive TLS and this for connections per request, both ways, so that
// the two compare.
//
// The clients offer TLS 1.3 with X25519 alone, as OpenSSL 3.0's (and wrk's)
// key share does, send no ALPN and do not verify the certificate (wrk does
// not either; the server's signature is still checked). They are goroutines
// of one process: bench/compare runs it pinned to the load CPU with
// GOMAXPROCS=1.
//
// It prints two kinds of lines. The result, as bench/compare's wrk script
// prints wrk's:
//
//	WRK-RESULT duration-µs requests bytes connect read write status timeout p50-µs p99-µs
//
// where requests are the exchanges completed (each a connection and its
// handshake), bytes the response bytes read (heads included, after
// decryption), the four error counts as wrk's (a failed dial or handshake
// is a connect error), status the responses with a status of 400 or more,
// and the latencies are from the dial to the response's last byte, the
// handshake included. And for each kind of handshake seen, how many:
//
//	TLS-STATE version cipher-suite group full|resumed count
package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

type options struct {
	addr       string
	path       string
	serverName string
	conns      int
	duration   time.Duration
	perClient  int // exchanges each client makes at most; 0: no bound
	timeout    time.Duration
	resume     bool
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8443", "`host:port` to connect to")
	flag.StringVar(&o.path, "path", "/", "the path to GET")
	flag.StringVar(&o.serverName, "servername", "bench.test", "the `name` sent in SNI and Host")
	flag.IntVar(&o.conns, "c", 64, "concurrent clients")
	flag.DurationVar(&o.duration, "d", 3*time.Second, "how long to start new connections")
	flag.IntVar(&o.perClient, "n", 0, "exchanges each client makes at most, `0` for no bound but -d")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Second, "the longest one exchange, dial to last byte, may take")
	flag.BoolVar(&o.resume, "resume", false, "offer each client's last session ticket (default: every handshake full)")
	flag.Parse()
	if flag.NArg() > 0 || o.conns < 1 || o.duration <= 0 || o.perClient < 0 || o.timeout <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	res := load(o)
	res.print(os.Stdout)
	if res.requests == 0 {
		fmt.Fprintf(os.Stderr, "tlsload: no exchange completed; first error: %v\n", res.firstErr)
		os.Exit(1)
	}
}

// clientConfig is what every client offers: TLS 1.3, X25519, no ALPN, and
// with resume a session cache of its own, holding the one ticket it was
// last given (wrk keeps one session per connection, too).
func clientConfig(o options) *tls.Config {
	cfg := &tls.Config{
		ServerName:         o.serverName,
		MinVersion:         tls.VersionTLS13,
		CurvePreferences:   []tls.CurveID{tls.X25519},
		InsecureSkipVerify: true, // a load generator; the signature is checked still
	}
	if o.resume {
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
	}
	return cfg
}

// state is the kind of a handshake: what was negotiated, and whether it
// resumed a session.
type state struct {
	version, cipher uint16
	group           tls.CurveID
	resumed         bool
}

func (s state) String() string {
	kind := "full"
	if s.resumed {
		kind = "resumed"
	}
	return fmt.Sprintf("%s %s %s %s", strings.ReplaceAll(tls.VersionName(s.version), " ", "v"), tls.CipherSuiteName(s.cipher), s.group, kind)
}

// result is a run: counts, latencies and handshakes, summed over the clients.
type result struct {
	duration                              time.Duration
	requests, bytes                       int64
	connect, read, write, status, timeout int64
	latencies                             []time.Duration
	states                                map[state]int64
	firstErr                              error
}

func (r *result) add(o *result) {
	r.requests += o.requests
	r.bytes += o.bytes
	r.connect += o.connect
	r.read += o.read
	r.write += o.write
	r.status += o.status
	r.timeout += o.timeout
	r.latencies = append(r.latencies, o.latencies...)
	for s, n := range o.states {
		r.states[s] += n
	}
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
}

func (r *result) fail(counter *int64, err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		counter = &r.timeout
	}
	*counter++
	if r.firstErr == nil {
		r.firstErr = err
	}
}

// load runs o.conns clients until o.duration has passed; exchanges under
// way then are finished and counted.
func load(o options) *result {
	total := &result{states: map[state]int64{}}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	req := []byte("GET " + o.path + " HTTP/1.1\r\nHost: " + o.serverName + "\r\nConnection: close\r\n\r\n")
	start := time.Now()
	stop := start.Add(o.duration)
	for range o.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := client(o, clientConfig(o), req, stop)
			mu.Lock()
			total.add(r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	total.duration = time.Since(start)
	return total
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// client makes exchanges one after the other until stop, or until it has
// made o.perClient of them (tried, failed ones included).
func client(o options, cfg *tls.Config, req []byte, stop time.Time) *result {
	r := &result{states: map[state]int64{}}
	d := net.Dialer{Timeout: o.timeout}
	cr := &countingReader{}
	br := bufio.NewReaderSize(cr, 4<<10)
	for n := 0; time.Now().Before(stop) && (o.perClient == 0 || n < o.perClient); n++ {
		t0 := time.Now()
		nc, err := d.Dial("tcp", o.addr)
		if err != nil {
			r.fail(&r.connect, err)
			continue
		}
		nc.SetDeadline(t0.Add(o.timeout))
		tc := tls.Client(nc, cfg)
		if err := tc.Handshake(); err != nil {
			nc.Close()
			r.fail(&r.connect, err)
			continue
		}
		cs := tc.ConnectionState()
		r.states[state{cs.Version, cs.CipherSuite, cs.CurveID, cs.DidResume}]++
		if _, err := tc.Write(req); err != nil {
			tc.Close()
			r.fail(&r.write, err)
			continue
		}
		cr.r, cr.n = tc, 0
		br.Reset(cr)
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		r.bytes += cr.n
		tc.Close()
		if err != nil {
			r.fail(&r.read, err)
			continue
		}
		if resp.StatusCode >= 400 {
			r.fail(&r.status, fmt.Errorf("status %s", resp.Status))
			continue
		}
		r.requests++
		r.latencies = append(r.latencies, time.Since(t0))
	}
	return r
}

// percentile is the latency below which a share p (0 to 1) of ds lies,
// the nearest rank of the sorted latencies; 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func (r *result) print(w io.Writer) {
	us := func(d time.Duration) int64 { return d.Microseconds() }
	fmt.Fprintf(w, "WRK-RESULT %d %d %d %d %d %d %d %d %d %d\n",
		us(r.duration), r.requests, r.bytes, r.connect, r.read, r.write, r.status, r.timeout,
		us(percentile(r.latencies, 0.50)), us(percentile(r.latencies, 0.99)))
	lines := make([]string, 0, len(r.states))
	for s, n := range r.states {
		lines = append(lines, fmt.Sprintf("TLS-STATE %s %d", s, n))
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if r.firstErr != nil {
		fmt.Fprintf(w, "first error: %v\n", r.firstErr)
	}
}
