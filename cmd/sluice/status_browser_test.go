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
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
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

// screenshotDir is where the browser test saves its screenshots: the
// directory SLUICE_SCREENSHOTS names (CI keeps it as an artifact), else
// testdata/screenshots beside this file, which git ignores.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SLUICE_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join("testdata", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// overflowJS lists, in the page, what does not fit the viewport's width:
// the document scrolling sideways, an element reaching past either edge,
// and an element whose content is cut off or scrolls sideways in its own
// box (the Drain button behind a table's scrollbar, say). Empty when
// everything fits.
const overflowJS = `(() => {
	const width = document.documentElement.clientWidth;
	const name = (e) => e.tagName.toLowerCase() + (e.className ? "." + String(e.className).trim().replace(/\s+/g, ".") : "") +
		(e.dataset && e.dataset.field ? "[" + e.dataset.field + "]" : "");
	const bad = [];
	if (document.documentElement.scrollWidth > width) {
		bad.push("the document is " + document.documentElement.scrollWidth + "px wide");
	}
	for (const e of document.body.querySelectorAll("*")) {
		const r = e.getBoundingClientRect();
		if (r.width === 0 && r.height === 0) continue;
		if (r.left < -0.5 || r.right > width + 0.5) {
			bad.push(name(e) + " spans " + Math.round(r.left) + ".." + Math.round(r.right) + "px");
		} else if (getComputedStyle(e).overflowX !== "visible" && e.scrollWidth > e.clientWidth + 1) {
			bad.push(name(e) + " cuts its content: " + e.scrollWidth + "px in " + e.clientWidth + "px");
		}
	}
	return bad.slice(0, 20);
})()`

// TestStatusPageInBrowser loads /status in headless chromium while
// requests flow through sluice to two servers and a dead one (and to an
// upstream whose servers are all gone), and checks
// that the page's numbers move, that they match /api/upstreams once the
// traffic stops, that it lists the dead server's failures grouped with a
// count and their Proxy-Status, says when the dead server comes back in
// relative time, that its Drain button drains, and that it fits a 1200px
// screen and a phone's 390px without sideways scrolling. It saves a
// screenshot at each width (screenshotDir).
func TestStatusPageInBrowser(t *testing.T) {
	exe := chromium(t)
	a := upstreamtest.Start(t, upstreamtest.OK("a"))
	b := upstreamtest.Start(t, upstreamtest.OK("b"))
	dead := freeAddr(t) // nothing listens: connections are refused
	// An upstream whose every server is gone: its requests fail for good
	// after every try.
	gone1, gone2 := freeAddr(t), freeAddr(t)
	// A cached route, whose answers are fresh for a second: its store's
	// card shows hits and misses.
	c := upstreamtest.Start(t, func(c *upstreamtest.Conn, r *upstreamtest.Request) {
		c.Respond(200, "cached", upstreamtest.Field{Name: "Cache-Control", Value: "max-age=1"})
	})
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := fmt.Sprintf("listen: [{address: 127.0.0.1:0}]\naccess_log: {enabled: false}\nadmin: {address: %s}\n"+
		"cache: {stores: {default: {memory: 8MiB}}}\n"+
		"routes: [{path_prefix: /gone/, upstream: gone}, {path_prefix: /cached/, upstream: c, cache: {}}, {upstream: app}]\n"+
		"upstreams:\n  app:\n    balance: round_robin\n"+
		"    servers: [{address: %s}, {address: %s}, {address: %s}]\n"+
		"  gone:\n    servers: [{address: %s}, {address: %s}]\n"+
		"  c:\n    servers: [{address: %s}]\n", freeAddr(t), a.Addr(), b.Addr(), dead, gone1, gone2, c.Addr())
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
			for _, p := range []string{"/", "/", "/", "/gone/", "/cached/x"} {
				if resp, err := client.Get("http://" + r.proxy + p); err == nil {
					io.Copy(io.Discard, resp.Body) // read whole, the connection is kept alive
					resp.Body.Close()
				}
			}
			// The pause is the load's own pace, not a wait for an
			// event: traffic that the page's figures follow.
			time.Sleep(2 * time.Millisecond)
		}
	}()
	stopTraffic := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopTraffic)

	ctx := browser(t, exe)
	cell := func(server, field string) string {
		return fmt.Sprintf(`article.server[data-server=%q] [data-field=%q]`, server, field)
	}
	// text reads an element's text in one evaluation in the page: the
	// page redraws each second, and a node found by one call may be gone
	// by the next.
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
	// waitPage polls the page until cond holds, within the browser
	// context's deadline.
	waitPage := func(what string, cond func() bool) {
		t.Helper()
		deadline, _ := ctx.Deadline()
		wait.Within(t, time.Until(deadline), "the page to show "+what, cond)
	}
	// redrawn waits for the page to draw itself once more, after a change
	// of viewport.
	redrawn := func() {
		t.Helper()
		updates := func() string {
			s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.updates || ""`))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		before := updates()
		waitPage("a redraw", func() bool { return updates() != before })
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
	// Repeated failures are one line with a count, and each line says
	// its decision once, as the logs word it.
	waitPage("a failure counted more than once", func() bool {
		n, _ := strconv.Atoi(strings.TrimSuffix(text(`ul.errors li[data-server="`+dead+`"] [data-field="count"]`), "×"))
		return n > 1
	})
	waitPage("the failures of the upstream whose servers are all gone", func() bool {
		return strings.Contains(text(`ul.errors[data-upstream="gone"]`), "not retried: tries exhausted")
	})
	for _, up := range []string{"app", "gone"} {
		errs := text(`ul.errors[data-upstream="` + up + `"]`)
		if strings.Contains(errs, "retried (") || strings.Count(errs, "not retried") != strings.Count(errs, "not retried: ") {
			t.Errorf("%s's failures do not read as the logs' decisions, once each:\n%s", up, errs)
		}
	}
	if errs := text(`ul.errors[data-upstream="app"]`); !strings.Contains(errs, "retrying: nothing of the request reached the upstream") {
		t.Errorf("app's failures do not say why the dead server's tries were retried:\n%s", errs)
	}
	// The dead server is down (or ejected), and back in some seconds:
	// times are relative, never a date.
	back := regexp.MustCompile(`^(down|ejected) back in \d+ s · `)
	waitPage("the dead server down, back in some seconds", func() bool { return back.MatchString(text(cell(dead, "state"))) })
	if page := text("body"); regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d|[AP]M\b`).MatchString(page) {
		t.Errorf("the page shows a date or a clock time, not a relative time:\n%s", page)
	}

	// The cache store's card: its hit ratio, and hits and misses.
	store := func(field string) string {
		return `article.store[data-store="default"] [data-field="` + field + `"]`
	}
	waitPage("the cache store's hits and misses", func() bool {
		return number(store("hits")) > 0 && number(store("misses")) > 0 && strings.HasSuffix(text(store("hit_ratio")), "%")
	})

	// The Drain button drains.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`article.server[data-server="`+b.Addr()+`"] button[data-action="drain"]`))); err != nil {
		t.Fatal(err)
	}
	waitPage("b drained", func() bool {
		_, ss := r.servers(t)
		return ss[b.Addr()].Drained
	})
	waitPage("b's card drained", func() bool {
		return strings.HasPrefix(text(cell(b.Addr(), "state")), "drained")
	})

	// It fits a laptop's screen and a phone's, with nothing wider than
	// the viewport and nothing behind a scrollbar of its own.
	dir := screenshotDir(t)
	for _, width := range []int64{1200, 390} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 900)); err != nil {
			t.Fatal(err)
		}
		redrawn()
		waitPage("the dead server down at "+strconv.Itoa(int(width))+"px", func() bool { return back.MatchString(text(cell(dead, "state"))) })
		bad, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](overflowJS))
		if err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 {
			t.Errorf("at %dpx, what does not fit:\n%s", width, strings.Join(bad, "\n"))
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, fmt.Sprintf("status-%dpx.png", width))
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", file)
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
}
