package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/clock"
	"github.com/sluice-proxy/sluice/proxy/internal/spare"
)

// ShedObserver is an optional interface of an Observer. Shed is called
// when the accept loop, out of file descriptors, answered n waiting
// clients 503 (Proxy-Status proxy_internal_error) and closed their
// connections without reading a request from them; err is the accept
// failure that made it do so. Like the Observer's methods, it must not
// block.
type ShedObserver interface {
	Shed(n int, err error)
}

// shedAfter is how long accepts must have failed for want of descriptors
// before the clients waiting are answered 503, and so about the longest a
// client waits for a descriptor to come free while the shortage lasts.
// A shortage shorter than that (a burst of slow requests) delays clients
// and fails none. nginx stops accepting for accept_mutex_delay (500 ms)
// after such a failure and HAProxy pauses the listener; both leave the
// clients to wait, and time out if the shortage lasts, which is what
// keep-alive clients holding their descriptors make it do.
const shedAfter = 100 * time.Millisecond

// acceptState is one accept loop's: its back-off, its spare descriptor,
// and its limit of lines about running out.
type acceptState struct {
	backoff time.Duration
	short   time.Time // when accepts began failing for want of descriptors; zero while they work
	spare   *spare.Spare
	lines   logSampler
	// shed is what a client turned away is sent: shedAnswer on a plain
	// listener; nothing on a TLS one, whose client waits for a
	// handshake and would take a plain answer for garbage: it sees the
	// connection close at once instead.
	shed []byte
}

func newAcceptState(shed []byte) *acceptState { return &acceptState{spare: spare.Hold(), shed: shed} }

// close gives the spare descriptor back, as Serve returns.
func (st *acceptState) close() { st.spare.Release() }

// accepted resets the state after an accept that worked, and takes the
// spare descriptor again if it was lost.
func (st *acceptState) accepted() {
	st.backoff, st.short = 0, time.Time{}
	st.spare.Hold()
}

// acceptFailed is the accept loop's answer to Accept failing with err:
// how long to wait before accepting again, or false when err ends Serve.
// A timeout, or a shortage of descriptors or memory, is waited out, as
// net/http does, doubling the wait from 5 ms up to a second. Out of
// descriptors for shedAfter, it answers the clients waiting 503 with the
// spare descriptor (package spare), and waits at most shedAfter between
// tries, so that the clients who come while the shortage lasts wait about
// that long for a descriptor at most, and then are answered.
func (srv *Server) acceptFailed(ln net.Listener, st *acceptState, err error) (time.Duration, bool) {
	var ne net.Error
	if !(errors.As(err, &ne) && ne.Timeout() || fault.LocalExhaustion(err)) {
		return 0, false
	}
	st.backoff = min(max(2*st.backoff, 5*time.Millisecond), time.Second)
	if fault.Resource(err) != "descriptors" {
		srv.logAcceptFailed(err, st.backoff, &st.lines)
		return st.backoff, true
	}
	// One line when the shortage begins, and one for each round of
	// clients answered, not one per try.
	st.backoff = min(st.backoff, shedAfter)
	now := clock.Now()
	if st.short.IsZero() {
		st.short = now
		if ok, left, _ := st.lines.take(now); ok {
			attrs := []slog.Attr{slog.String("error", err.Error())}
			if left > 0 {
				attrs = append(attrs, slog.Int("suppressed", left))
			}
			srv.ErrorLog.LogAttrs(context.Background(), slog.LevelWarn,
				"out of file descriptors; clients wait for one, and are answered 503 if none comes free within "+shedAfter.String(),
				attrs...)
		}
	}
	if now.Sub(st.short) >= shedAfter {
		srv.shed(ln, st.spare, st.shed, err, &st.lines)
	}
	return st.backoff, true
}

// shedAnswer is what a client turned away at accept receives: the answer a
// request that found no descriptor for its upstream connection gets
// (fault.Exhausted), and the connection closes.
var shedAnswer = func() []byte {
	e := fault.New(fault.Exhausted, fault.Internally, nil)
	status := e.Answer()
	body := strconv.Itoa(status) + " " + h1.StatusText(status) + " (" + e.ProxyStatus() + ")\n"
	return []byte("HTTP/1.1 " + strconv.Itoa(status) + " " + h1.StatusText(status) + "\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n" +
		"Cache-Control: no-store\r\n" +
		"Proxy-Status: sluice; error=" + e.ProxyStatus() + `; details="out of file descriptors"` + "\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Connection: close\r\n\r\n" + body)
}()

// noteShed tells the observer that n clients were turned away at accept,
// and logs it within the accept loop's limit of lines.
func (srv *Server) noteShed(n int, err error, lines *logSampler) {
	if o, ok := srv.Observer.(ShedObserver); ok {
		o.Shed(n, err)
	}
	ok, left, _ := lines.take(clock.Now())
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.Int("clients", n), slog.String("error", err.Error())}
	if left > 0 {
		attrs = append(attrs, slog.Int("suppressed", left))
	}
	srv.ErrorLog.LogAttrs(context.Background(), slog.LevelError,
		"out of file descriptors; waiting clients answered 503 at accept", attrs...)
}

// logAcceptFailed logs an accept failure the accept loop waits out; a
// failure for want of memory goes through the loop's limit of lines.
func (srv *Server) logAcceptFailed(err error, delay time.Duration, lines *logSampler) {
	attrs := []slog.Attr{slog.String("error", err.Error()), slog.Duration("delay", delay)}
	if fault.LocalExhaustion(err) {
		ok, left, _ := lines.take(clock.Now())
		if !ok {
			return
		}
		if left > 0 {
			attrs = append(attrs, slog.Int("suppressed", left))
		}
	}
	srv.ErrorLog.LogAttrs(context.Background(), slog.LevelWarn, "accept failed; retrying", attrs...)
}

// shed answers the clients waiting on ln with the spare descriptor (see
// spare.Spare.Shed) when an accept failed with err for want of
// descriptors, and logs them within lines. It returns how many it
// answered.
func (srv *Server) shed(ln net.Listener, sp *spare.Spare, answer []byte, err error, lines *logSampler) int {
	n := sp.Shed(ln, answer)
	if n > 0 {
		srv.noteShed(n, err, lines)
	}
	return n
}
