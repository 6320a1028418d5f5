package proxy

import (
	"context"
	"log/slog"
	"sync"
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
// level each gets a line at debug; otherwise at most clientFaultLines a
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

// clientFaultLines is how many client-fault lines a second the error log
// gets at info level.
const clientFaultLines = 5

// lineSampler lets up to clientFaultLines lines through in each second and
// counts the rest, to be told by the next line let through or, when none
// comes within the second, by a line of their own (flush). Its zero value
// is ready.
type lineSampler struct {
	mu      sync.Mutex
	second  time.Time // when the current second began
	lines   int       // let through in it
	leftOut int       // left out since the last line let through
	due     bool      // a flush is due at the end of the second
}

// take reports whether a line may be written now and, when it may, how
// many were left out before it. When it leaves the first line of a second
// out, report is how long until the caller should flush (0 otherwise).
func (ls *lineSampler) take(now time.Time) (ok bool, leftOut int, report time.Duration) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if now.Sub(ls.second) >= time.Second {
		ls.second, ls.lines = now, 0
	}
	if ls.lines >= clientFaultLines {
		ls.leftOut++
		if !ls.due {
			ls.due = true
			report = max(ls.second.Add(time.Second).Sub(now), time.Millisecond)
		}
		return false, 0, report
	}
	ls.lines++
	leftOut, ls.leftOut = ls.leftOut, 0
	return true, leftOut, 0
}

// flush returns the number of lines left out and not yet told, and
// forgets them.
func (ls *lineSampler) flush() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := ls.leftOut
	ls.leftOut, ls.due = 0, false
	return n
}
