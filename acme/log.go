package acme

import (
	"context"
	"log/slog"
	"sync/atomic"

	"go.uber.org/zap/zapcore"
)

// zapCore writes certmagic's log (zap) to a slog.Handler, sluice's log:
//
//   - its errors and warnings as errors and warnings, but at debug level
//     once the Manager is stopping, when they are the cancellation's;
//   - its info lines, the steps of its work (about fifteen for a
//     certificate), at debug level: the Manager logs at info what an
//     operator wants to see (onEvent);
//   - its debug lines, several for each handshake, below debug level,
//     where no sluice log level shows them.
//
// Each entry keeps its logger's name (logger=acme.obtain) and its fields,
// as attributes in their order.
type zapCore struct {
	h        slog.Handler
	fields   []zapcore.Field // from With, encoded only when an entry is written
	stopping *atomic.Bool
}

// belowDebug is where certmagic's debug lines go.
const belowDebug = slog.LevelDebug - 4

func (c *zapCore) level(l zapcore.Level) slog.Level {
	switch {
	case l < zapcore.InfoLevel:
		return belowDebug
	case l == zapcore.InfoLevel:
		return slog.LevelDebug
	case c.stopping != nil && c.stopping.Load():
		return slog.LevelDebug
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func (c *zapCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), c.level(l))
}

func (c *zapCore) With(fields []zapcore.Field) zapcore.Core {
	return &zapCore{h: c.h, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...), stopping: c.stopping}
}

func (c *zapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zapCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	r := slog.NewRecord(e.Time, c.level(e.Level), e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	addFields(&r, c.fields)
	addFields(&r, fields)
	return c.h.Handle(context.Background(), r)
}

// addFields adds zap fields to r as attributes, in their order (zap's map
// encoder keeps none), each as zap would encode it: a duration as a
// duration, an error as its text, an array as a list.
func addFields(r *slog.Record, fields []zapcore.Field) {
	for _, f := range fields {
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		for k, v := range enc.Fields {
			r.AddAttrs(slog.Any(k, v))
		}
	}
}

func (c *zapCore) Sync() error { return nil }
