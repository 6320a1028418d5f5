package proxy

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/clock"
)

// ShedObserver is an optional interface of an Observer. Shed is called
// when the accept loop, out of file descriptors, answered n waiting
// clients 503 (Proxy-Status proxy_internal_error) and closed their
// connections without reading a request from them (shed_linux.go); err is
// the accept failure that made it do so. Like the Observer's methods, it
// must not block.
type ShedObserver interface {
	Shed(n int, err error)
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
func (srv *Server) noteShed(n int, err error, lines *logLimit) {
	if o, ok := srv.Observer.(ShedObserver); ok {
		o.Shed(n, err)
	}
	left, ok := lines.allow(clock.Now())
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
// failure for want of descriptors or memory goes through the loop's limit
// of lines.
func (srv *Server) logAcceptFailed(err error, delay time.Duration, lines *logLimit) {
	attrs := []slog.Attr{slog.String("error", err.Error()), slog.Duration("delay", delay)}
	if fault.LocalExhaustion(err) {
		left, ok := lines.allow(clock.Now())
		if !ok {
			return
		}
		if left > 0 {
			attrs = append(attrs, slog.Int("suppressed", left))
		}
	}
	srv.ErrorLog.LogAttrs(context.Background(), slog.LevelWarn, "accept failed; retrying", attrs...)
}
