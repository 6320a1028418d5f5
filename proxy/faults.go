package proxy

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluice-proxy/sluice/fault"
	"github.com/sluice-proxy/sluice/internal/clock"
)

// ClientStage says where in a request a client fault happened.
type ClientStage uint8

const (
	InHead     ClientStage = iota // reading the request head
	InBody                        // reading the request body
	InResponse                    // writing the response
)

func (st ClientStage) String() string {
	switch st {
	case InHead:
		return "head"
	case InBody:
		return "body"
	}
	return "response"
}

// ClientFaultObserver is an Observer that is also told of every client
// fault: a request head not completed within the header timeout (408), one
// that broke HTTP/1.1, one cut off by the client's close or reset, and a
// client that went away, stalled or sent a broken body during a request.
// It is told once per fault, whether or not a request head was read, from
// the connection's goroutine, and must not block. Faults are counted here
// exactly; their log lines are sampled (see Server.ErrorLog).
type ClientFaultObserver interface {
	ClientFault(stage ClientStage, e *fault.Error)
}

// clientFault reports a client's fault to the observer and the error log.
// s is the request's Session, nil when none was begun.
//
// One client can cause a fault per connection, and many clients together
// thousands a second (a slow-head attack, a broken load balancer), none of
// which is sluice's or an upstream's trouble: with the error log at debug
// level each gets a line at debug; otherwise at most logLinesPerSecond a
// second are written at info, each saying how many were left out since the
// last one written (or, when no line follows within the second, in a line
// of its own). The observer counts them all.
func (srv *Server) clientFault(s *Session, client string, stage ClientStage, e *fault.Error) {
	if o, ok := srv.Observer.(ClientFaultObserver); ok {
		o.ClientFault(stage, e)
	}
	l := srv.ErrorLog
	ctx := context.Background()
	level := slog.LevelDebug
	var leftOut int
	if !l.Enabled(ctx, level) {
		level = slog.LevelInfo
		if !l.Enabled(ctx, level) {
			return
		}
		ok, left, report := srv.faultLines.take(clock.Now())
		if !ok {
			if report > 0 {
				time.AfterFunc(report, srv.logLeftOut)
			}
			return
		}
		leftOut = left
	}
	attrs := []slog.Attr{
		slog.String("client", client),
		slog.String("stage", stage.String()),
	}
	if s != nil && s.Request.Method() != "" {
		attrs = append(attrs,
			slog.String("method", s.Request.Method()),
			slog.String("target", string(s.Request.Target())))
	}
	attrs = append(attrs, slog.String("error", e.Error()))
	if e.Why != "" {
		attrs = append(attrs, slog.String("decision", e.Why))
	}
	if leftOut > 0 {
		attrs = append(attrs, slog.Int("left_out", leftOut))
	}
	l.LogAttrs(ctx, level, "client fault", attrs...)
}

// logLeftOut writes how many client-fault lines were left out, if any
// were since the last line written.
func (srv *Server) logLeftOut() {
	if n := srv.faultLines.flush(); n > 0 {
		srv.ErrorLog.LogAttrs(context.Background(), slog.LevelInfo, "client faults left out of the log",
			slog.Int("left_out", n))
	}
}
