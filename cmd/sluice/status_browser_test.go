//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
)

// chromium returns the path of Debian's chromium, skipping the test when
// it is missing, unless CI=true, where it fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is required when CI=true (Debian: apt-get install chromium)")
	}
	t.Skip("chromium is missing (Debian: apt-get install chromium); skipping the status page's browser test")
	return ""
}

// browser starts headless chromium, with what keeps it off the network
// (this test needs none, and a machine without it would stall it), and
// returns a browsing context that ends with the test.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc()
	})
	return ctx
}

// TestStatusPageInBrowser loads /status in headless chromium while
// requests flow through sluice to two servers and a dead one, and checks
// that the page's numbers move, that they match /api/upstreams once the
// traffic stops, that it lists the dead server's failures with their
// Proxy-Status, that its Drain button drains, and that it fits a phone's
// width.
func TestStatusPageInBrowser(t *testing.T) {
	exe := chromium(t)
	a := upstreamtest.Start(t, upstreamtest.OK("a"))
	b := upstreamtest.Start(t, upstreamtest.OK("b"))
	dead := freeAddr(t) // nothing listens: connections are refused
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nadmin: {address: %s}\n"+
		"routes: [{upstream: app}]\nupstreams:\n  app:\n    balance: round_robin\n"+
		"    servers: [{address: %s}, {address: %s}, {address: %s}]\n", freeAddr(t), a.Addr(), b.Addr(), dead)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startAdminRun(t, path)

	// Traffic, until stopped.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: 10 * time.Second}
		for {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := client.Get("http://" + r.proxy + "/"); err == nil {
				io.Copy(io.Discard, resp.Body) // read whole, the connection is kept alive
				resp.Body.Close()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	stopTraffic := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopTraffic)

	ctx := browser(t, exe)
	cell := func(server, field string) string {
		return fmt.Sprintf(`tr[data-server=%q] td[data-field=%q]`, server, field)
	}
	// text reads an element's text in one evaluation in the page: the
	// page redraws its tables each second, and a node found by one call
	// may be gone by the next.
	text := func(sel string) string {
		t.Helper()
		js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.textContent : "" })()`, sel)
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	number := func(sel string) float64 {
		t.Helper()
		s := text(sel)
		n, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("%s shows %q, not a number", sel, s)
		}
		return n
	}
	// waitPage polls the page until cond holds; the context's deadline
	// bounds it.
	waitPage := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("gave up waiting for the page to show %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(390, 844), // a phone
		chromedp.Navigate("http://"+r.admin+"/status"),
		chromedp.WaitVisible(chromedp.CSS(cell(a.Addr(), "tries"))),
	); err != nil {
		t.Fatal(err)
	}

	// The numbers move while traffic flows.
	first := number(cell(a.Addr(), "tries"))
	waitPage("a's tries grow", func() bool { return number(cell(a.Addr(), "tries")) > first })
	waitPage("the client's connection", func() bool {
		return strings.Contains(text("#connections"), r.proxy+" http/1.1: 1")
	})
	waitPage("a rate above zero", func() bool { return number(cell(a.Addr(), "tries_per_second")) > 0 })
	waitPage("a p50 latency", func() bool { return text(cell(a.Addr(), "p50")) != "–" })
	waitPage("the dead server's failures with their Proxy-Status", func() bool {
		return strings.Contains(text(`ul.errors`), "sluice; error=connection_refused")
	})
	waitPage("the dead server's failure reasons", func() bool {
		return strings.Contains(text(cell(dead, "reasons")), "connect_refused")
	})

	// Readable on a phone: the page is no wider than the screen (the
	// tables scroll in their own boxes).
	fits, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
	if err != nil {
		t.Fatal(err)
	}
	if !fits {
		t.Error("the page is wider than a 390px screen")
	}

	// Once the traffic stops, the page settles on what /api/upstreams says.
	stopTraffic()
	_, ss := r.servers(t)
	for _, addr := range []string{a.Addr(), b.Addr(), dead} {
		want := ss[addr]
		waitPage("the totals of "+addr+" as /api/upstreams has them", func() bool {
			return number(cell(addr, "tries")) == float64(want.Tries) &&
				number(cell(addr, "failures")) == float64(want.Failures) &&
				number(cell(addr, "retries")) == float64(want.Retries)
		})
	}
	if ss[a.Addr()].Tries == 0 || ss[b.Addr()].Tries == 0 || ss[dead].Failures == 0 || ss[dead].Retries == 0 {
		t.Fatalf("the traffic did not reach every server: %+v", ss)
	}

	// The Drain button drains.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`tr[data-server="`+b.Addr()+`"] button[data-action="drain"]`))); err != nil {
		t.Fatal(err)
	}
	waitPage("b drained", func() bool {
		_, ss := r.servers(t)
		return ss[b.Addr()].Drained
	})
	waitPage("b's row drained", func() bool {
		return strings.Contains(text(cell(b.Addr(), "state")), "drained")
	})
}
