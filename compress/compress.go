// Package compress compresses response bodies on their way to the client,
// as a route phase: a proxy.ResponseFilter that negotiates a content coding
// (zstd, br, gzip) with the request's Accept-Encoding and installs a pooled
// encoder as the response's proxy.BodyFilter, which the engine streams the
// body through.
package compress

import (
	"bytes"
	"fmt"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// Options configure a Phase. The zero value compresses every response of a
// default type, of any size, with zstd, br or gzip at their default
// levels.
type Options struct {
	// Algorithms are offered in this order of preference, which breaks
	// ties between codings the client gives the same q-value; nil means
	// DefaultAlgorithms.
	Algorithms []Algorithm
	// MinSize: a response whose Content-Length is below it is sent as it
	// is (one of unknown length is compressed). 0 compresses any size.
	MinSize int64
	// Types are the media type patterns of the responses to compress
	// (see Types); nil means DefaultTypes.
	Types []string
	// Levels, each in its algorithm's scale; 0 means the Default level.
	GzipLevel, BrotliLevel, ZstdLevel int
}

// DefaultAlgorithms are offered when Options name none: zstd compresses
// about as well as br at a fraction of its CPU, and gzip is what every
// client has.
var DefaultAlgorithms = []Algorithm{Zstd, Brotli, Gzip}

// DefaultTypes are compressed when Options name none: text and the
// text-based formats of web pages and APIs. Images other than SVG, video,
// archives and fonts are compressed already.
var DefaultTypes = []string{"text/*", "application/json", "application/javascript",
	"application/xml", "image/svg+xml"}

// Phase compresses the responses of a route. It is a proxy.ResponseFilter
// (a route.Route phase), immutable and safe for concurrent use.
//
// A response is compressed when the client accepts one of the algorithms
// (Negotiate), its Content-Type matches, and none of these holds: it has
// no body (HEAD, 204, 304), it is a 206 or carries Content-Range, it has a
// Content-Encoding already, the request or the response says
// Cache-Control: no-transform, its Content-Length is below MinSize.
// Compressing sets Content-Encoding, weakens a strong ETag (W/), removes
// Accept-Ranges (ranges of the compressed body are not served), and leaves
// the framing to the engine (Content-Length dropped, chunked). Every
// response of a matching type that is not ruled out on its own gets
// Vary: Accept-Encoding, whether the client's Accept-Encoding led to
// compressing it or not; a HEAD response, or a 304 that names its
// Content-Type, gets the Vary and the weak ETag its GET would get, and is
// not otherwise changed (a 304 without a Content-Type is left as it is:
// whether its GET would be compressed is not known). A compressed
// response's access log line ends with compressed=ALGORITHM.
type Phase struct {
	algorithms []Algorithm
	minSize    int64
	types      Types
	pools      [numAlgorithms]*encoders
}

// New returns the phase for opts, or an error naming what is wrong with
// them (an unknown algorithm, a bad type pattern, a level out of range).
func New(opts Options) (*Phase, error) {
	p := &Phase{algorithms: opts.Algorithms, minSize: opts.MinSize}
	if p.algorithms == nil {
		p.algorithms = DefaultAlgorithms
	}
	if len(p.algorithms) == 0 {
		return nil, fmt.Errorf("compress: no algorithm")
	}
	patterns := opts.Types
	if patterns == nil {
		patterns = DefaultTypes
	}
	var err error
	if p.types, err = ParseTypes(patterns); err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	if p.minSize < 0 {
		return nil, fmt.Errorf("compress: min size %d is negative", p.minSize)
	}
	levels := [numAlgorithms]int{Gzip: opts.GzipLevel, Brotli: opts.BrotliLevel, Zstd: opts.ZstdLevel}
	for _, alg := range p.algorithms {
		if alg == None || alg >= numAlgorithms {
			return nil, fmt.Errorf("compress: unknown algorithm %d", alg)
		}
		if p.pools[alg] != nil {
			return nil, fmt.Errorf("compress: %v named twice", alg)
		}
		if p.pools[alg], err = newEncoders(alg, levels[alg]); err != nil {
			return nil, fmt.Errorf("compress: %w", err)
		}
	}
	return p, nil
}

// ResponseFilter decides whether the response is compressed and, if so,
// changes its head and installs the encoder.
func (p *Phase) ResponseFilter(s *proxy.Session, _ *proxy.Peer, resp *h1.Response) {
	if !p.eligible(s, resp) {
		return
	}
	h := &resp.Header
	addVary(h)
	alg := Negotiate(&s.Request.Header, p.algorithms)
	if alg == None {
		return
	}
	weakenETag(h)
	if s.Request.Method() == "HEAD" || resp.Status == 304 {
		return
	}
	e := p.pools[alg].get()
	if e == nil {
		return
	}
	h.Set("Content-Encoding", alg.String())
	h.Del("Accept-Ranges")
	s.FilterBody(e)
	s.Note("compressed", alg.String())
}

// eligible reports whether the response would be compressed for a client
// that accepts it: all but the negotiation.
func (p *Phase) eligible(s *proxy.Session, resp *h1.Response) bool {
	h := &resp.Header
	switch {
	case resp.Status < 200 || resp.Status == 204 || resp.Status == 206:
		return false
	case h.Has("Content-Encoding") || h.Has("Content-Range"):
		return false
	case noTransform(h) || noTransform(&s.Request.Header):
		// RFC 9111 §5.2.1.6, §5.2.2.6: no transformation of the content.
		return false
	case !p.types.Match(h.Get("Content-Type")):
		return false
	}
	if v := h.Get("Content-Length"); v != nil && resp.Status != 304 {
		// (A 304's Content-Length, if any, is not its GET's.)
		if n, ok := h1.ParseDecimal(v); ok && n < p.minSize {
			return false
		}
	}
	if s.ResponseLength() == 0 && s.Request.Method() != "HEAD" && resp.Status != 304 {
		return false // an empty body
	}
	return true
}

// noTransform reports whether h's Cache-Control holds no-transform.
func noTransform(h *h1.Header) bool {
	for i := 0; i < h.Len(); i++ {
		if h1.EqualFold(h.Name(i), "Cache-Control") && hasDirective(h.Value(i), "no-transform") {
			return true
		}
	}
	return false
}

// hasDirective reports whether the Cache-Control value v holds the
// directive d, with or without an argument.
func hasDirective(v []byte, d string) bool {
	for len(v) > 0 {
		var item []byte
		item, v = h1.CutList(v)
		if i := bytes.IndexByte(item, '='); i >= 0 {
			item = bytes.TrimSpace(item[:i])
		}
		if h1.EqualFold(item, d) {
			return true
		}
	}
	return false
}

// addVary adds Accept-Encoding to the response's Vary, unless it is there
// or Vary is "*".
func addVary(h *h1.Header) {
	for i := 0; i < h.Len(); i++ {
		if !h1.EqualFold(h.Name(i), "Vary") {
			continue
		}
		for v := h.Value(i); len(v) > 0; {
			var item []byte
			item, v = h1.CutList(v)
			if h1.EqualFold(item, "Accept-Encoding") || (len(item) == 1 && item[0] == '*') {
				return
			}
		}
	}
	h.Add("Vary", "Accept-Encoding")
}

// weakenETag makes a strong ETag weak (RFC 9110 §8.8.3): the compressed
// body is not byte for byte the one the upstream tagged, though it means
// the same.
func weakenETag(h *h1.Header) {
	v := h.Get("ETag")
	if len(v) == 0 || bytes.HasPrefix(v, []byte("W/")) {
		return
	}
	h.Set("ETag", "W/"+string(v))
}
