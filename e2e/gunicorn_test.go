package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needGunicorn returns the python to run gunicorn with: $SLUICE_E2E_PYTHON,
// or Debian's python3. It skips the test when that python cannot import
// gunicorn, unless CI=true, where a missing gunicorn fails the test.
func needGunicorn(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test with gunicorn: skipped with -short")
	}
	python := cmp.Or(os.Getenv("SLUICE_E2E_PYTHON"), DefaultPython)
	if err := HaveGunicorn(python); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("gunicorn is required when CI=true: %v", err)
		}
		t.Skipf("gunicorn is missing (Debian: apt-get install python3-gunicorn); skipping: %v", err)
	}
	return python
}

// TestGunicornChurn is seed 004 end to end: gunicorn's gthread workers
// recycle every 200 requests (--max-requests, no jitter), and a dying
// worker takes its keep-alive connections with it, resetting a request
// that arrives on one. nginx retries the GETs and answers the POSTs 502.
// Behind sluice, no client may see a 5xx or a transport error, and no
// request may be processed twice: the POSTs carry no Idempotency-Key, so a
// POST that may have reached the app must not be sent again.
func TestGunicornChurn(t *testing.T) { gunicornChurn(t, "", 0) }

// TestGunicornChurnH2 is TestGunicornChurn with the clients' requests as
// streams of two HTTP/2 connections: each stream is its own request to
// the upstream, over the same pool, and the same rules must hold. The
// clients never resend a request, whatever the proxy answered.
func TestGunicornChurnH2(t *testing.T) { gunicornChurn(t, "", 2) }

// TestGunicornChurnUnix is TestGunicornChurn with gunicorn bound to a Unix
// socket (--bind unix:PATH): a recycled worker's pooled connections die
// as they do over TCP (EOF or EPIPE, no reset), and the same rules must
// hold.
func TestGunicornChurnUnix(t *testing.T) {
	// Under os.TempDir(): t.TempDir() can pass the 107 bytes a socket's
	// path may have.
	dir, err := os.MkdirTemp("", "gu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	gunicornChurn(t, filepath.Join(dir, "g.sock"), 0)
}

// gunicornChurn runs the churn scenario against gunicorn on 127.0.0.1, or
// on the Unix socket at socket when it is not "", from HTTP/1.1 clients,
// or from streams of h2Conns HTTP/2 connections when that is above 0.
func gunicornChurn(t *testing.T, socket string, h2Conns int) {
	python := needGunicorn(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	g, err := StartGunicorn(ctx, GunicornOptions{
		Python: python,
		Dir:    t.TempDir(),
		Log:    &LineWriter{Line: func(s string) { t.Log("gunicorn: " + s) }},
		Socket: socket,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	sl, err := StartSluice(SluiceConfig(g.Addr), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sl.Close() })

	const requests, clients, bodySize = 3000, 16, 64
	start := time.Now()
	results := Load{Addr: sl.Addr, Clients: clients, Requests: requests, BodySize: bodySize, Prefix: "g", H2Conns: h2Conns}.Run(ctx)
	elapsed := time.Since(start)
	if err := sl.Close(); err != nil {
		t.Errorf("sluice: %v", err)
	}
	g.Stop() // gracefully: whatever a worker still held is recorded
	records, err := g.Records()
	if err != nil {
		t.Fatal(err)
	}
	rep := Tally(results, records, bodySize)
	log := sl.Log()

	from := fmt.Sprintf("%d keep-alive clients", clients)
	if h2Conns > 0 {
		from = fmt.Sprintf("%d clients, streams of %d HTTP/2 connections", clients, h2Conns)
	}
	t.Logf("%d requests from %s in %s; %d worker processes (%d recycles)",
		requests, from, elapsed.Round(time.Millisecond), rep.PIDs, max(0, rep.PIDs-2))
	t.Logf("clients and app:\n%s", rep)
	t.Logf("sluice pool: %+v", sl.Server.Pool.Stats())
	t.Logf("sluice failed tries: %s", strings.Join(TrySummary(log), "; "))

	if sent := rep.Total(func(m *MethodReport) int { return m.Sent }); sent != requests {
		t.Errorf("only %d of %d requests were sent: %v", sent, requests, ctx.Err())
	}
	for _, m := range rep.Methods {
		if n := m.Failed(); n > 0 {
			t.Errorf("%s: %d client errors (5xx or transport): statuses %s, %d transport errors; the app processed %d of them",
				m.Method, n, m.Statuses(), m.Errors, m.FailedProcessed)
		}
		if m.Duplicated > 0 {
			t.Errorf("%s: %d ids processed more than once", m.Method, m.Duplicated)
		}
		if m.Lost > 0 {
			t.Errorf("%s: %d ids answered 2xx but never processed", m.Method, m.Lost)
		}
		if m.Mismatched > 0 || m.BodyMismatch > 0 {
			t.Errorf("%s: %d responses for the wrong request, %d bodies of the wrong size", m.Method, m.Mismatched, m.BodyMismatch)
		}
	}
	if rep.Unknown > 0 {
		t.Errorf("the app processed %d ids no client sent", rep.Unknown)
	}
	if rep.PIDs < 4 {
		t.Errorf("only %d worker processes seen: workers did not recycle as the scenario needs", rep.PIDs)
	}
	explain(t, rep, results, log)
}

// explain logs, for every id with a problem, what the client got and
// sluice's error log lines for it.
func explain(t *testing.T, rep *Report, results []Result, log []LogLine) {
	t.Helper()
	bad := make(map[string]bool)
	for _, m := range rep.Methods {
		for _, id := range m.Bad {
			bad[id] = true
		}
	}
	if len(bad) == 0 {
		return
	}
	for i := range results {
		if r := &results[i]; bad[r.ID] {
			t.Logf("%s %s: status %d, Proxy-Status %q, error %v, took %s", r.Method, r.ID, r.Status, r.ProxyStatus, r.Err, r.Duration)
		}
	}
	for i := range log {
		if l := &log[i]; bad[l.ID()] {
			t.Logf("sluice: %s", l.Raw)
		}
	}
}
