package balance

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/sock"
)

// ActiveCheck configures active health checks: the group probes each server
// every Interval on a connection of its own (never a pooled one, and closed
// after the check), and takes a server out after Fall failed checks in a row
// and back after Rise passed ones. Servers start healthy, so a new group
// serves at once.
//
// A Method, Path or Host that cannot be written into a request as is
// (whitespace or control characters) fails every HTTP check.
//
// Checks are spread out: each server's first check comes at a random time
// within the first Interval, and each later wait is Interval ±10%.
//
// A field with a default, stated with it, gets the default when zero
// (Interval, Timeout, Rise and Fall also when negative); BodyContains and
// TCP are off when zero.
type ActiveCheck struct {
	// Path (default "/") is the request target of an HTTP check.
	Path string
	// Method (default GET) is the method of an HTTP check.
	Method string
	// Host (default the server's Name) is the Host header of an HTTP check.
	Host string
	// Expect (default 200) are the statuses that pass an HTTP check.
	Expect []int
	// BodyContains, when set, must occur in the first 64 KiB of the body
	// (transfer coding removed) for an HTTP check to pass.
	BodyContains string
	// TCP makes the check a connect-and-close: a server passes if it
	// accepts a connection (no TLS handshake even with TLS set).
	TCP bool
	// TLS, when set, makes HTTP checks run over TLS with this client
	// config, within Timeout like the rest of the check; an empty
	// ServerName is the host of the server's Name (its configured address,
	// the DNS name for a resolved server). nil: plain TCP.
	TLS *tls.Config
	// Interval (default 5s) is the time between a server's checks.
	Interval time.Duration
	// Timeout (default 1s) bounds one check, connect to last byte.
	Timeout time.Duration
	// Rise (default 2) passed checks in a row bring a server back.
	Rise int
	// Fall (default 3) failed checks in a row take a server out.
	Fall int
}

// Defaults of an ActiveCheck.
const (
	DefaultCheckPath     = "/"
	DefaultCheckMethod   = "GET"
	DefaultCheckInterval = 5 * time.Second
	DefaultCheckTimeout  = time.Second
	DefaultRise          = 2
	DefaultFall          = 3
)

// DefaultExpect are the statuses that pass an HTTP check when
// ActiveCheck.Expect is empty.
var DefaultExpect = []int{200}

// Limits of what an HTTP check reads.
const (
	checkMaxHead    = 64 << 10
	checkMaxHeaders = 100
	checkMaxBody    = 64 << 10
)

func (a ActiveCheck) withDefaults() ActiveCheck {
	if a.Path == "" {
		a.Path = DefaultCheckPath
	}
	if a.Method == "" {
		a.Method = DefaultCheckMethod
	}
	if len(a.Expect) == 0 {
		a.Expect = DefaultExpect
	}
	if a.Interval <= 0 {
		a.Interval = DefaultCheckInterval
	}
	if a.Timeout <= 0 {
		a.Timeout = DefaultCheckTimeout
	}
	if a.Rise <= 0 {
		a.Rise = DefaultRise
	}
	if a.Fall <= 0 {
		a.Fall = DefaultFall
	}
	return a
}

// syncChecks starts a check loop for each of all that has none and stops
// those of servers no longer in all. g.mu is held.
func (g *Group) syncChecks(all []*Server) {
	if g.opts.Active == nil || !g.running() {
		return
	}
	if g.checks == nil {
		g.checks = make(map[*Server]context.CancelFunc)
	}
	for s, stop := range g.checks {
		if !slices.Contains(all, s) {
			stop()
			delete(g.checks, s)
		}
	}
	for _, s := range all {
		if g.checks[s] == nil {
			ctx, stop := context.WithCancel(g.ctx)
			g.checks[s] = stop
			g.wg.Add(1)
			go g.checkLoop(ctx, s)
		}
	}
}

// checkLoop checks s until ctx ends.
func (g *Group) checkLoop(ctx context.Context, s *Server) {
	defer g.wg.Done()
	a := g.opts.Active
	t := time.NewTimer(time.Duration(randN(g.opts.Rand, uint64(a.Interval))))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := g.check(ctx, s)
		if ctx.Err() != nil {
			return // interrupted, not failed
		}
		g.checked(s, err)
		// Interval ±10%.
		t.Reset(a.Interval*9/10 + time.Duration(randN(g.opts.Rand, uint64(a.Interval/5)+1)))
	}
}

// check runs one check of s and returns why it failed, or nil.
func (g *Group) check(ctx context.Context, s *Server) error {
	a := g.opts.Active
	host := a.Host
	if host == "" {
		host = s.Name
		if _, unix := sock.UnixPath(s.Name); unix {
			host = "localhost" // as a request without a Host is sent (proxy.Peer)
		}
	}
	if !a.TCP && (!validTarget(a.Path) || !h1.ValidName(a.Method) || host == "" || !h1.ValidValue(host)) {
		return errBadCheck
	}
	ctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	var conn net.Conn
	var err error
	if g.opts.dial != nil {
		conn, err = g.opts.dial(ctx, s.Addr)
	} else {
		var d net.Dialer
		conn, err = sock.Dial(ctx, &d, s.Addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	if a.TCP {
		return nil
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if a.TLS != nil {
		cfg := a.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName = s.Host()
		}
		tc := tls.Client(conn, cfg)
		if err := tc.Handshake(); err != nil {
			return err
		}
		conn = tc
	}
	req := a.Method + " " + a.Path + " HTTP/1.1\r\nHost: " + host +
		"\r\nConnection: close\r\nUser-Agent: sluice-health-check\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return err
	}
	r := h1.NewReader(conn)
	defer r.Release()
	var resp h1.Response
	// Skip interim responses (RFC 9110 §15.2), a few at most.
	for range 5 {
		head, err := r.ReadHead(checkMaxHead, false)
		if err != nil {
			return err
		}
		if err := h1.ParseResponse(&resp, head, checkMaxHeaders); err != nil {
			return err
		}
		if resp.Status >= 200 || resp.Status == 101 {
			break
		}
	}
	if !slices.Contains(a.Expect, resp.Status) {
		return fmt.Errorf("status %d", resp.Status)
	}
	if a.BodyContains == "" {
		return nil
	}
	f, _, err := h1.ResponseFraming(a.Method, &resp)
	if err != nil {
		return err
	}
	var body h1.Body
	body.Init(r, f, true, checkMaxHead)
	var got []byte
	for len(got) < checkMaxBody {
		seg, err := body.Next()
		got = append(got, seg[:min(len(seg), checkMaxBody-len(got))]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if !bytes.Contains(got, []byte(a.BodyContains)) {
		return errBodyMismatch
	}
	return nil
}

var (
	errBodyMismatch = errors.New("body does not contain the expected text")
	errBadCheck     = errors.New("the check's method, path or host cannot go into a request")
)

// validTarget reports whether p can be a request target as is: no
// whitespace or control characters (RFC 9112 §3.2).
func validTarget(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] == 0x7f {
			return false
		}
	}
	return p != ""
}

// checked applies one check's outcome to s.
func (g *Group) checked(s *Server, err error) {
	a := g.opts.Active
	now := g.opts.Now().UnixNano()
	var reason string
	s.mu.Lock()
	if err == nil {
		s.checkFail = 0
		s.checkOK++
		if s.activeDown.Load() && s.checkOK >= a.Rise {
			reason = fmt.Sprintf("active: %d passed checks", s.checkOK)
			s.activeDown.Store(false)
			s.comeBackAt(now)
		}
	} else {
		s.checkOK = 0
		s.checkFail++
		s.checkErr = err.Error()
		if !s.activeDown.Load() && s.checkFail >= a.Fall {
			reason = fmt.Sprintf("active: %d failed checks: %s", s.checkFail, s.checkErr)
			s.activeDown.Store(true)
		}
	}
	s.mu.Unlock()
	if reason != "" {
		g.noteHealth(s, now, reason)
	}
}
