// Command h3load loads an HTTP/3 server with GET requests, as h2load does
// an HTTP/2 one (Debian's h2load has no QUIC), and prints h2load's summary
// lines, which bench/compare reads:
//
//	go run ./bench/h3load [-c 16] [-m 10] [-D 3s] [-sni NAME] https://127.0.0.1:8443/small
//
// It opens -c QUIC connections with quic-go's client (each on a UDP socket
// of its own), and on each keeps -m requests in flight, each sent as soon
// as the one before it on its stream slot has been read whole, for -D;
// the requests in flight then finish. Requests go through quic-go's HTTP/3
// client (http3.ClientConn) on those connections. As h2load, it does not
// verify the server's certificate; the SNI is the URL's host, or -sni.
//
// What it prints (the figures as h2load computes them):
//
//	TLS Protocol: TLSv1.3                  of the first connection's handshake
//	Cipher: TLS_AES_128_GCM_SHA256
//	Server Temp Key: X25519MLKEM768
//	Application protocol: h3
//	finished in 3.01s, 41234.00 req/s, 4.10MB/s    req/s: requests done but errored, over -D
//	requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout
//	status codes: N 2xx, N 3xx, N 4xx, N 5xx
//	traffic: 12.34MB (12345678) total, 1.02MB (1069420) data    total: every byte QUIC received; data: the bodies
//	                     min         max         mean         sd        +/- sd
//	time for request:      185us     34.34ms      1.77ms      1.75ms    91.28%
//
// A request that gets no whole response (a reset stream, a closed
// connection, 10 s without an answer) is errored (and failed); one
// answered with a status of 400 or more is failed. It exits 1 when no
// connection could be made.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

func main() {
	conns := flag.Int("c", 16, "QUIC connections")
	streams := flag.Int("m", 10, "requests in flight on each connection")
	dur := flag.Duration("D", 3*time.Second, "how long requests are sent (those in flight then finish)")
	sni := flag.String("sni", "", "the TLS server name (default: the URL's host)")
	profile := flag.String("cpuprofile", "", "write h3load's own CPU profile to `file`")
	flag.Parse()
	if flag.NArg() != 1 || *conns < 1 || *streams < 1 || *dur <= 0 {
		fmt.Fprintln(os.Stderr, "usage: h3load [-c N] [-m N] [-D duration] [-sni name] https://host:port/path")
		os.Exit(2)
	}
	u, err := url.Parse(flag.Arg(0))
	if err != nil || u.Scheme != "https" || u.Port() == "" {
		fmt.Fprintln(os.Stderr, "h3load: the URL must be https://host:port/path")
		os.Exit(2)
	}
	if *sni == "" {
		*sni = u.Hostname()
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "h3load:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	s, err := run(u, *sni, *conns, *streams, *dur)
	if err != nil {
		fmt.Fprintln(os.Stderr, "h3load:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	s.print(os.Stdout, *dur)
}

// stats is what the workers count.
type stats struct {
	mu        sync.Mutex
	started   int64
	done      int64
	errored   int64
	codes     [4]int64 // 2xx, 3xx, 4xx, 5xx
	other     int64    // statuses outside 200..599
	data      int64    // body bytes
	times     []time.Duration
	firstErr  error
	quicBytes uint64 // received on all connections
	tls       tls.ConnectionState
	elapsed   time.Duration
}

func run(u *url.URL, sni string, nconns, streams int, d time.Duration) (*stats, error) {
	addr, err := net.ResolveUDPAddr("udp", u.Host)
	if err != nil {
		return nil, err
	}
	tlsConf := &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}
	quicConf := &quic.Config{MaxIdleTimeout: 30 * time.Second}
	tr := &http3.Transport{TLSClientConfig: tlsConf, QUICConfig: quicConf}
	defer tr.Close()
	s := &stats{}
	start := time.Now()
	var qcs []*quic.Conn
	var wg sync.WaitGroup
	deadline := start.Add(d)
	for i := range nconns {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		qc, err := quic.DialAddr(ctx, addr.String(), tlsConf, quicConf)
		cancel()
		if err != nil {
			if len(qcs) == 0 && i == nconns-1 {
				return nil, fmt.Errorf("no connection: %w", err)
			}
			s.noteErr(err)
			continue
		}
		if len(qcs) == 0 {
			s.tls = qc.ConnectionState().TLS
		}
		qcs = append(qcs, qc)
		cc := tr.NewClientConn(qc)
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.work(cc, u.String(), deadline)
			}()
		}
	}
	if len(qcs) == 0 {
		return nil, errors.New("no connection")
	}
	wg.Wait()
	s.elapsed = time.Since(start)
	for _, qc := range qcs {
		s.quicBytes += qc.ConnectionStats().BytesReceived
		qc.CloseWithError(0, "")
	}
	return s, nil
}

// work sends requests on cc, one after the other, until deadline.
func (s *stats) work(cc *http3.ClientConn, target string, deadline time.Time) {
	times := make([]time.Duration, 0, 1024)
	defer func() {
		s.mu.Lock()
		s.times = append(s.times, times...)
		s.mu.Unlock()
	}()
	for time.Now().Before(deadline) {
		atomic.AddInt64(&s.started, 1)
		t0 := time.Now()
		status, n, err := get(cc, target)
		elapsed := time.Since(t0)
		atomic.AddInt64(&s.done, 1)
		atomic.AddInt64(&s.data, n)
		if err != nil {
			atomic.AddInt64(&s.errored, 1)
			s.noteErr(err)
			continue
		}
		times = append(times, elapsed)
		switch {
		case status >= 200 && status < 600:
			atomic.AddInt64(&s.codes[status/100-2], 1)
		default:
			atomic.AddInt64(&s.other, 1)
		}
	}
}

// get sends one GET on cc and reads its response whole.
func get(cc *http3.ClientConn, target string) (status int, n int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", target, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return 0, 0, err
	}
	n, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, n, err
}

func (s *stats) noteErr(err error) {
	s.mu.Lock()
	if s.firstErr == nil {
		s.firstErr = err
	}
	s.mu.Unlock()
}

// print writes h2load's summary lines.
func (s *stats) print(w io.Writer, d time.Duration) {
	if s.tls.Version != 0 {
		fmt.Fprintf(w, "TLS Protocol: %s\n", tlsVersion(s.tls.Version))
		fmt.Fprintf(w, "Cipher: %s\n", tls.CipherSuiteName(s.tls.CipherSuite))
		fmt.Fprintf(w, "Server Temp Key: %s\n", s.tls.CurveID)
		fmt.Fprintf(w, "Application protocol: %s\n", s.tls.NegotiatedProtocol)
	}
	ok := s.done - s.errored
	fmt.Fprintf(w, "\nfinished in %.2fs, %.2f req/s, %s/s\n", s.elapsed.Seconds(), float64(ok)/d.Seconds(),
		size(float64(s.quicBytes)/s.elapsed.Seconds()))
	failed := s.errored + s.codes[2] + s.codes[3] + s.other
	fmt.Fprintf(w, "requests: %d total, %d started, %d done, %d succeeded, %d failed, %d errored, 0 timeout\n",
		s.started, s.started, s.done, s.done-failed, failed, s.errored)
	fmt.Fprintf(w, "status codes: %d 2xx, %d 3xx, %d 4xx, %d 5xx\n", s.codes[0], s.codes[1], s.codes[2], s.codes[3])
	fmt.Fprintf(w, "traffic: %s (%d) total, %s (%d) data\n", size(float64(s.quicBytes)), s.quicBytes, size(float64(s.data)), s.data)
	lo, hi, mean, sd, within := spread(s.times)
	fmt.Fprintf(w, "                     min         max         mean         sd        +/- sd\n")
	fmt.Fprintf(w, "time for request: %10s  %10s  %10s  %10s  %8.2f%%\n", dur(lo), dur(hi), dur(mean), dur(sd), within)
	if s.firstErr != nil {
		fmt.Fprintf(os.Stderr, "h3load: first error: %v\n", s.firstErr)
	}
}

// spread returns the least, the most, the mean and the standard deviation
// of ts, and the percentage of them within the mean ± the deviation.
func spread(ts []time.Duration) (lo, hi, mean, sd time.Duration, within float64) {
	if len(ts) == 0 {
		return
	}
	lo, hi = ts[0], ts[0]
	var sum float64
	for _, t := range ts {
		lo, hi = min(lo, t), max(hi, t)
		sum += float64(t)
	}
	m := sum / float64(len(ts))
	var sq float64
	for _, t := range ts {
		sq += (float64(t) - m) * (float64(t) - m)
	}
	dev := math.Sqrt(sq / float64(len(ts)))
	n := 0
	for _, t := range ts {
		if math.Abs(float64(t)-m) <= dev {
			n++
		}
	}
	return lo, hi, time.Duration(m), time.Duration(dev), 100 * float64(n) / float64(len(ts))
}

// dur formats d as h2load does: 185us, 34.34ms, 1.20s.
func dur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dus", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// size formats n bytes as h2load does: 11.10MB, 5.97KB, 512B.
func size(n float64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2fGB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2fMB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2fKB", n/(1<<10))
	}
	return fmt.Sprintf("%.0fB", n)
}

func tlsVersion(v uint16) string {
	switch v {
	case tls.VersionTLS13:
		return "TLSv1.3"
	case tls.VersionTLS12:
		return "TLSv1.2"
	}
	return fmt.Sprintf("0x%04x", v)
}
