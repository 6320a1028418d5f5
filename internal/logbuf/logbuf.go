// Package logbuf writes a log's lines in batches.
//
// An access log line per request written on its own costs a write(2) per
// request, about a tenth of what proxying a small request costs. A Writer
// gathers lines and writes them when its buffer fills, and at the latest a
// set interval after the first line it holds, so a busy proxy makes one
// system call per batch while a quiet one still shows each line within the
// interval. What a crash catches in the buffer is lost; Close writes it.
package logbuf

import (
	"io"
	"sync"
	"time"
)

// Writer buffers writes to an underlying writer. It is safe for
// concurrent use; each Write is kept whole, so lines written whole stay
// whole.
type Writer struct {
	w     io.Writer
	size  int
	every time.Duration

	mu     sync.Mutex
	buf    []byte
	timer  *time.Timer // armed by the first line buffered since the last write
	armed  bool
	closed bool
	err    error // the last failed write's error, until reported
}

// New returns a Writer that writes to w in batches of up to size bytes,
// holding a line at most every. A size of 0 or less writes each Write
// through at once.
func New(w io.Writer, size int, every time.Duration) *Writer {
	b := &Writer{w: w, size: size, every: every}
	if size > 0 {
		b.buf = make([]byte, 0, size)
		b.timer = time.AfterFunc(time.Hour, b.tick)
		b.timer.Stop()
	}
	return b
}

// Write buffers p, first writing what the buffer holds if p does not fit.
// A p as large as the buffer, and any Write after Close, goes through at
// once. The error is that of a write to the underlying writer made by this
// call, or one made by the timer since the last Write.
func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.size <= 0 || b.closed {
		return b.w.Write(p)
	}
	if len(b.buf)+len(p) > b.size {
		b.flush()
	}
	if len(p) >= b.size {
		if _, err := b.w.Write(p); err != nil {
			b.err = err
		}
	} else {
		b.buf = append(b.buf, p...)
		if !b.armed {
			b.armed = true
			b.timer.Reset(b.every)
		}
	}
	err := b.err
	b.err = nil
	return len(p), err
}

// flush writes what the buffer holds; b.mu held.
func (b *Writer) flush() {
	if len(b.buf) == 0 {
		return
	}
	if _, err := b.w.Write(b.buf); err != nil {
		b.err = err
	}
	b.buf = b.buf[:0]
}

func (b *Writer) tick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = false
	b.flush()
}

// Flush writes what the buffer holds now.
func (b *Writer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flush()
	err := b.err
	b.err = nil
	return err
}

// Close writes what the buffer holds; later Writes go through at once. It
// does not close the underlying writer.
func (b *Writer) Close() error {
	b.mu.Lock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
		b.armed = false
	}
	b.mu.Unlock()
	return b.Flush()
}
