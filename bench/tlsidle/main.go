// Command tlsidle measures what idle TLS client connections and half-open
// TLS handshakes cost the sluice binary, and whether other clients are
// served meanwhile:
//
//	go run ./bench/tlsidle [-conns 10000] [-halfopen 10000] [-settle 130s] [-curves default|x25519] [-proto http/1.1|h2|h3] [-sluice BIN] [-heapprofile FILE] [-keep]
//
// It runs sluice with one TLS listener (a certificate made for the run,
// ECDSA P-256) in front of a Go HTTP upstream, warms it up and reads its
// RSS (VmRSS from /proc), then:
//
//   - opens -halfopen connections that send nothing (half of them) or the
//     first 11 bytes of a ClientHello (the other half), while a normal
//     client sends a GET on a new TLS connection every 100 ms: RSS per
//     half-open connection, and the normal client's failures and slowest
//     request;
//   - closes them and opens -conns keep-alive TLS 1.3 connections, each
//     through its handshake and one GET, and lets them sit idle (they
//     park after 200 ms): RSS per connection, the growth divided by their
//     number, read 3 s after they opened and later, up to -settle: 130 s
//     is after the collection Go forces every 2 minutes, 250 s after the
//     second, which lets the runtime give back the free heap the first
//     left (its scavenger's goal is set at each collection from the heap
//     in use before the sweep: after the first, the handshakes' garbage
//     still counts). With
//     -proto h2 they speak HTTP/2 (ALPN h2, one GET on stream 1, SETTINGS
//     acknowledged); an idle HTTP/2 connection parks too, its engine
//     stopped between frames. With -proto h3 they are QUIC connections
//     (quic-go's client, all on one UDP socket of this process) to the
//     listener's HTTP/3 socket, each after one GET on a request stream.
//
// With the RSS it prints sluice's goroutines (its admin listener's
// /debug/pprof/goroutine), after the warm-up and with the idle
// connections open, and where the RSS goes (the runtime's MemStats, from
// the admin listener's /debug/pprof/heap?debug=1, which forces no
// collection): the heap's spans in use, free spans the runtime keeps and
// has not given back to the system, stacks, and the rest; per connection,
// from the same figures after the warm-up. -heapprofile saves sluice's
// heap profile (in use after a collection) with the idle connections open,
// after the last reading.
//
// The clients run in this process, so sluice's RSS is its own. Everything
// listens on 127.0.0.1; sluice runs in a temp dir, killed on exit.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/bench/internal/rig"
)

type options struct {
	conns, halfOpen int
	settle          time.Duration
	curves          string
	proto           string
	sluice          string
	heapProfile     string
	keep            bool
}

func main() {
	var o options
	flag.IntVar(&o.conns, "conns", 10000, "idle keep-alive TLS connections")
	flag.IntVar(&o.halfOpen, "halfopen", 10000, "half-open TLS handshakes")
	flag.DurationVar(&o.settle, "settle", 130*time.Second, "how long RSS is read with the idle connections open (3s, 30s, 60s, 130s, 250s)")
	flag.StringVar(&o.curves, "curves", "default", "the clients' key shares: default (X25519MLKEM768 first, as Go's and browsers') or x25519")
	flag.StringVar(&o.proto, "proto", "http/1.1", "what the idle connections speak: http/1.1, h2 or h3")
	flag.StringVar(&o.sluice, "sluice", "", "sluice `binary` (default: build ./cmd/sluice into the temp dir)")
	flag.StringVar(&o.heapProfile, "heapprofile", "", "save sluice's heap profile to `file` with the idle connections open, after the last reading")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp dir (config, certificate and logs) and print its path")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "tlsidle:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, remove, err := rig.TempDir("tlsidle", o.keep)
	if err != nil {
		return err
	}
	defer remove()
	// Each process, this one and sluice, holds one end of each connection.
	if err := rig.RaiseNoFile(uint64(max(o.conns, o.halfOpen)+1000), "-conns and -halfopen"); err != nil {
		return err
	}
	bin, err := rig.Binary(o.sluice, dir)
	if err != nil {
		return err
	}
	roots, certFile, keyFile, err := makeCertificate(dir)
	if err != nil {
		return err
	}
	client := &tls.Config{ServerName: "tlsidle.test", RootCAs: roots, NextProtos: []string{"http/1.1"}}
	if o.curves == "x25519" {
		client.CurvePreferences = []tls.CurveID{tls.X25519}
	}
	idleClient := client
	switch o.proto {
	case "h2", "h3":
		idleClient = client.Clone()
		idleClient.NextProtos = []string{o.proto}
	case "http/1.1":
	default:
		return fmt.Errorf("-proto %q: want http/1.1, h2 or h3", o.proto)
	}

	upstream, err := rig.ServeOK()
	if err != nil {
		return err
	}
	start := func(name string) (*sluice, error) {
		return startSluice(ctx, bin, filepath.Join(dir, name), certFile, keyFile, upstream, client, o.proto == "h3")
	}
	fmt.Printf("sluice %s; clients' key shares: %s; idle connections speak %s\n", bin, o.curves, o.proto)

	// Half-open handshakes beside a normal client, on a fresh sluice.
	sl, err := start("halfopen")
	if err != nil {
		return err
	}
	stopProbe := rig.Probe(ctx, func() error { return get(sl.Addr, client) })
	t0 := time.Now()
	half, failed, firstErr := openHalf(ctx, sl.Addr, o.halfOpen)
	fmt.Printf("%d half-open connections opened in %v (%d failed%s)\n", len(half), time.Since(t0).Round(time.Millisecond), failed, errText(firstErr))
	rig.SleepUntil(ctx, time.Now().Add(3*time.Second)) // parked after 200 ms
	held := rig.RSSKB(sl.Pid)
	normal := stopProbe()
	fmt.Printf("RSS after warm-up %d KiB, with them open %d KiB: %.2f KiB per half-open handshake\n",
		sl.base, held, float64(int64(held)-int64(sl.base))/float64(max(len(half), 1)))
	fmt.Printf("normal client meanwhile: %d requests on new TLS connections, %d failed, slowest %v\n",
		normal.N, normal.Failed, normal.Slowest.Round(time.Millisecond))
	for _, c := range half {
		c.Close()
	}
	sl.Stop()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	// Idle keep-alive connections, on a fresh sluice. Their handshakes
	// leave garbage that the heap holds until a collection and the
	// runtime returns at its scavenger's pace: RSS is read until after
	// the collection Go forces every 2 minutes.
	sl, err = start("idle")
	if err != nil {
		return err
	}
	defer sl.Stop()
	baseGoroutines, err := goroutines(sl.admin)
	if err != nil {
		return err
	}
	baseMem, err := memStats(sl.admin)
	if err != nil {
		return err
	}
	t0 = time.Now()
	var idle []io.Closer
	if o.proto == "h3" {
		var socket io.Closer
		idle, socket, failed, firstErr = openIdleH3(ctx, sl.Addr, idleClient, o.conns)
		if socket != nil {
			defer socket.Close() // after the connections' closes
		}
	} else {
		idle, failed, firstErr = openIdle(ctx, sl.Addr, idleClient, o.conns)
	}
	opened := time.Now()
	fmt.Printf("%d idle TLS connections opened in %v (%d failed%s)\n", len(idle), opened.Sub(t0).Round(time.Millisecond), failed, errText(firstErr))
	for _, after := range []time.Duration{3 * time.Second, 30 * time.Second, 60 * time.Second, 130 * time.Second, 250 * time.Second} {
		if after > o.settle {
			break
		}
		rig.SleepUntil(ctx, opened.Add(after))
		if ctx.Err() != nil {
			break
		}
		kb := rig.RSSKB(sl.Pid)
		fmt.Printf("RSS after warm-up %d KiB, %v after they opened %d KiB: %.2f KiB per idle TLS connection (%s)\n",
			sl.base, after, kb, float64(int64(kb)-int64(sl.base))/float64(max(len(idle), 1)), o.proto)
		if n, err := goroutines(sl.admin); err == nil {
			fmt.Printf("goroutines after warm-up %d, %v after they opened %d: %.2f per idle connection\n",
				baseGoroutines, after, n, float64(n-baseGoroutines)/float64(max(len(idle), 1)))
		}
		if m, err := memStats(sl.admin); err == nil {
			fmt.Println(m.perConn(baseMem, len(idle)))
		}
	}
	if o.heapProfile != "" && ctx.Err() == nil {
		if err := saveHeapProfile(sl.admin, o.heapProfile); err != nil {
			return err
		}
		fmt.Printf("heap profile (in use after a collection) saved to %s\n", o.heapProfile)
	}
	for _, c := range idle {
		c.Close()
	}
	return ctx.Err()
}

// sluice is a running sluice, warmed up.
type sluice struct {
	*rig.Sluice
	base  uint64 // RSS after the warm-up, KiB
	admin string // its admin listener's address
}

// startSluice runs bin in dir with a TLS listener for certFile and keyFile
// (serving HTTP/3 too when h3) in front of upstream, and warms it up with
// 200 GETs, each on a new TLS connection.
func startSluice(ctx context.Context, bin, dir, certFile, keyFile, upstream string, client *tls.Config, h3 bool) (*sluice, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", rig.FreePort())
	admin := fmt.Sprintf("127.0.0.1:%d", rig.FreePort())
	protocols := ""
	if h3 {
		protocols = "\n    protocols: [h3, h2, http/1.1]"
	}
	cfg := fmt.Sprintf(`listen:
  - address: %q
    tls: {certificates: [{cert: %q, key: %q}]}%s
timeouts: {header: 120s, idle: 600s}
limits: {h3: {idle_timeout: 600s}}
access_log: {enabled: false}
log: {level: error}
admin: {address: %q, pprof: true}
routes: [{upstream: web}]
upstreams:
  web:
    servers: [{address: %q}]
`, addr, certFile, keyFile, protocols, admin, upstream)
	sl, err := rig.Start(bin, dir, addr, cfg)
	if err != nil {
		return nil, err
	}
	try := func() error { return get(addr, client) }
	if err := sl.WaitServing(ctx, try); err != nil {
		sl.Stop()
		return nil, err
	}
	base, err := sl.WarmUp(try)
	if err != nil {
		sl.Stop()
		return nil, err
	}
	return &sluice{Sluice: sl, base: base, admin: admin}, nil
}

// goroutines returns the number of goroutines of the sluice whose admin
// listener is at admin, from its goroutine profile's first line
// ("goroutine profile: total N").
func goroutines(admin string) (int, error) {
	resp, err := http.Get("http://" + admin + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("goroutine profile: %w", err)
	}
	var n int
	if _, err := fmt.Sscanf(line, "goroutine profile: total %d", &n); err != nil {
		return 0, fmt.Errorf("goroutine profile %q: %w", line, err)
	}
	return n, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return "; first: " + err.Error()
}

// openIdle opens n TLS connections, 200 at a time, each after one GET.
func openIdle(ctx context.Context, addr string, cfg *tls.Config, n int) (conns []io.Closer, failed int, first error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200)
	for range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := openOne(addr, cfg)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if first == nil {
					first = err
				}
				return
			}
			conns = append(conns, c)
		}()
	}
	wg.Wait()
	return conns, failed, first
}

func openOne(addr string, cfg *tls.Config) (net.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if c.ConnectionState().NegotiatedProtocol == "h2" {
		if err := getH2(c); err != nil {
			c.Close()
			return nil, err
		}
		c.SetDeadline(time.Time{})
		return c, nil
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: tlsidle.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		if err == nil && resp.StatusCode != 200 {
			err = errors.New(resp.Status)
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// getH2 sends one GET on stream 1 of an HTTP/2 connection and reads
// frames until its response ended, acknowledging the server's SETTINGS, so
// that the connection is then idle in the state a browser's would be.
func getH2(c net.Conn) error {
	io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":path", Value: "/"}, {Name: ":authority", Value: "tlsidle.test"}} {
		enc.WriteField(f)
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			return fmt.Errorf("stream reset: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			return fmt.Errorf("GOAWAY: %v", f.ErrCode)
		}
		if f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream) {
			return nil
		}
	}
}

// partialHello is the start of a ClientHello record that announces 512
// bytes and brings 6.
const partialHello = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"

// openHalf opens n TCP connections to addr, 200 at a time; every other one
// sends the start of a ClientHello, the others nothing.
func openHalf(ctx context.Context, addr string, n int) (conns []net.Conn, failed int, first error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200)
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err == nil && i%2 == 0 {
				_, err = io.WriteString(c, partialHello)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if first == nil {
					first = err
				}
				return
			}
			conns = append(conns, c)
		}()
	}
	wg.Wait()
	return conns, failed, first
}

func get(addr string, cfg *tls.Config) error {
	c, err := openOne(addr, cfg)
	if err != nil {
		return err
	}
	return c.Close()
}

// makeCertificate makes a CA and a certificate for tlsidle.test signed by
// it (ECDSA P-256) and writes the certificate and its key into dir.
func makeCertificate(dir string) (roots *x509.CertPool, certFile, keyFile string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tlsidle CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "tlsidle.test"},
		DNSNames: []string{"tlsidle.test"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, "", "", err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "site.pem"), filepath.Join(dir, "site.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, "", "", err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, "", "", err
	}
	roots = x509.NewCertPool()
	roots.AddCert(ca)
	return roots, certFile, keyFile, nil
}
