package compress

import (
	"fmt"
	"io"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Default levels, each in its own algorithm's scale: fast enough for a
// proxy to compress on the fly at well over 50 MiB/s a core on JSON, with
// most of the ratio a higher level would give.
const (
	DefaultGzipLevel   = 5 // 1..9
	DefaultBrotliLevel = 4 // 0..11
	DefaultZstdLevel   = 3 // 1..22, zstd's own scale
)

// Windows: a proxy holds an encoder per response in flight, so the
// back-reference windows are modest (gzip's is fixed at 32 KiB): 256 KiB
// for brotli and 512 KiB for zstd, which every browser's decoder accepts.
const (
	brotliWindowBits = 18
	zstdWindow       = 512 << 10
)

// coder is what the three encoders have in common.
type coder interface {
	io.Writer
	Flush() error
	Close() error
	Reset(w io.Writer)
}

// encoder is one pooled compressor, a proxy.BodyFilter: it goes back to
// its pool when the body is closed or aborted.
type encoder struct {
	c    coder
	pool *sync.Pool
}

func (e *encoder) Start(w io.Writer)           { e.c.Reset(w) }
func (e *encoder) Write(p []byte) (int, error) { return e.c.Write(p) }
func (e *encoder) Flush() error                { return e.c.Flush() }

func (e *encoder) Close() error {
	err := e.c.Close()
	e.release()
	return err
}

func (e *encoder) Abort() { e.release() }

// release drops the encoder's hold on the body's writer and pools it.
func (e *encoder) release() {
	e.c.Reset(io.Discard)
	e.pool.Put(e)
}

// encoders pools the compressors of one algorithm at one level, so that a
// compressed response reuses an encoder's tables and window rather than
// allocating them (megabytes, for brotli and zstd).
type encoders struct {
	pool sync.Pool
	make func() (coder, error)
}

// newEncoders returns the pool for alg at level (0: the default), having
// made one encoder, which checks the level.
func newEncoders(alg Algorithm, level int) (*encoders, error) {
	p := &encoders{}
	switch alg {
	case Gzip:
		if level == 0 {
			level = DefaultGzipLevel
		}
		if level < 1 || level > 9 {
			return nil, fmt.Errorf("gzip level %d: want 1 to 9", level)
		}
		p.make = func() (coder, error) { return gzip.NewWriterLevel(io.Discard, level) }
	case Brotli:
		if level == 0 {
			level = DefaultBrotliLevel
		}
		if level < 1 || level > 11 {
			return nil, fmt.Errorf("br level %d: want 1 to 11", level)
		}
		p.make = func() (coder, error) {
			return brotli.NewWriterOptions(io.Discard, brotli.WriterOptions{Quality: level, LGWin: brotliWindowBits}), nil
		}
	case Zstd:
		if level == 0 {
			level = DefaultZstdLevel
		}
		if level < 1 || level > 22 {
			return nil, fmt.Errorf("zstd level %d: want 1 to 22", level)
		}
		el := zstd.EncoderLevelFromZstd(level)
		p.make = func() (coder, error) {
			// One goroutine: the encoder works in the caller's,
			// as a proxy compressing many responses at once wants.
			return zstd.NewWriter(nil, zstd.WithEncoderLevel(el), zstd.WithEncoderConcurrency(1),
				zstd.WithWindowSize(zstdWindow), zstd.WithLowerEncoderMem(true))
		}
	default:
		return nil, fmt.Errorf("no encoder for %v", alg)
	}
	c, err := p.make()
	if err != nil {
		return nil, fmt.Errorf("%v level %d: %w", alg, level, err)
	}
	p.pool.Put(&encoder{c: c, pool: &p.pool})
	return p, nil
}

// get returns an encoder from the pool, or a new one.
func (p *encoders) get() *encoder {
	if e, ok := p.pool.Get().(*encoder); ok {
		return e
	}
	c, err := p.make()
	if err != nil {
		return nil // cannot happen: newEncoders made one with the same options
	}
	return &encoder{c: c, pool: &p.pool}
}
