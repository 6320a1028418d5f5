//go:build linux

package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/internal/upstreamtest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// TestReloadUnderLoad reloads, five times, a file whose every reload
// starts a new server (the header timeout changes each time, a listener
// comes and goes), while Go clients send requests on kept-alive
// connections and on a new connection each to the listener that stays:
// none fails, none is refused.
func TestReloadUnderLoad(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.OK("ok"))
	conf := func(i int) string {
		listen := "listen: [{address: 127.0.0.1:0}]\n"
		if i%2 == 1 {
			listen = "listen: [{address: 127.0.0.1:0}, {address: 127.0.0.1:0}]\n"
		}
		return listen + fmt.Sprintf("access_log: {enabled: false}\ntimeouts: {header: %ds}\n", 10+i) +
			fmt.Sprintf(upstreamsOf, up.Addr())
	}
	s := startRunning(t, conf(0))
	l := startLoad(s.addr(0), 4, 4)
	defer func() {
		select {
		case <-l.stop:
		default:
			l.end()
		}
	}()
	waitOK := func(n int64) {
		t.Helper()
		before := l.ok.Load()
		if !wait.Until(20*time.Second, func() bool { return l.ok.Load() >= before+n }) {
			t.Fatalf("the load made no progress: %d ok, %d failed: %v", l.ok.Load(), l.failed.Load(), l.errs)
		}
	}
	srv := s.srv
	for i := 1; i <= 5; i++ {
		waitOK(200)
		s.reloadWith(t, conf(i))
		if s.srv == srv {
			t.Fatalf("reload %d: no new server", i)
		}
		srv = s.srv
	}
	waitOK(200)
	l.end()
	if n := l.failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed during the reloads: %v", n, n+l.ok.Load(), l.errs)
	}
	t.Logf("%d requests, none failed, over five reloads", l.ok.Load())
}
