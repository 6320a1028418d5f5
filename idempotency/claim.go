package idempotency

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/sluice-proxy/sluice/h1"
)

// Claim is a request's hold on its key, from Begin until the request
// ends. It belongs to the request that got it: while the request runs,
// the layer renews its lease in the background (every third of the
// lease); the request ends it exactly once, by one of:
//
//   - Keep(answer): the upstream answered. An answer whose status is in
//     the layer's release set (by default 408, 425, 429, 5xx) frees the
//     key, so that a retry goes through; one larger than max_response is
//     not kept, and retries get 409; any other is kept for the ttl and
//     replayed to every retry.
//   - Release(): no try of the request reached the upstream (every
//     connect failed; the streams were refused), so it was not processed:
//     the key is freed and the retry goes through.
//   - Unknown(): a try may have reached the upstream and no answer came
//     (a reset after the request was sent, a response timeout, an
//     answer cut off): the key is kept as outcome unknown for the ttl,
//     and retries get 502 (or are forwarded, with UnknownOutcome Forward).
//
// The first of them ends the claim and stops its renewal; later calls do
// nothing and return ErrEnded. A claim never ended stays in flight until
// the process exits (the goroutine renewing it runs on): end every claim.
// Its methods are safe for concurrent use, and may be called from any
// goroutine (after the response's last byte went downstream, so that the
// store's round trip does not delay the client).
type Claim struct {
	l     *Layer
	key   Key
	fp    Fingerprint
	token Token
	ended atomic.Bool
	lost  atomic.Bool // a renewal found the claim taken

	// The layer's live claims, for its renewer (under its lock).
	prev, next *Claim
	linked     bool
}

// ErrEnded is returned by a Claim's ending methods after the first.
var ErrEnded = errors.New("idempotency: the claim has ended already")

// claim makes the claim of a key Begin claimed, in c when it is not nil
// (a zero Claim, in an allocation of the caller's), and has it renewed.
func (l *Layer) claim(key Key, fp Fingerprint, token Token, c *Claim) *Claim {
	if c == nil {
		c = new(Claim)
	}
	c.l, c.key, c.fp, c.token = l, key, fp, token
	l.live.Add(1)
	l.renewer.add(c)
	return c
}

// Key returns the claimed key (a digest: it says nothing of the key).
func (c *Claim) Key() Key { return c.key }

// Keep ends the claim with the upstream's answer: kept for the ttl unless
// its status is in the release set (the key is then freed) or it is
// larger than max_response (not kept: retries get 409). The answer is
// encoded at once: a may be reused when Keep returns. The error is the
// store's (counted and logged by the layer; the request's own answer is
// not affected), ErrLost, or ErrEnded.
func (c *Claim) Keep(a *Answer) error {
	if c.l.release.Has(a.Status) {
		return c.end(StateNone, nil)
	}
	if int64(a.size()) > c.l.maxResp {
		return c.end(StateNotKept, nil)
	}
	return c.end(StateKept, a.Encode(make([]byte, 0, a.size())))
}

// Release ends the claim of a request that provably never reached the
// upstream, freeing its key.
func (c *Claim) Release() error { return c.end(StateNone, nil) }

// Unknown ends the claim of a request that may have been processed and
// got no answer: retries are told the outcome is unknown.
func (c *Claim) Unknown() error { return c.end(StateUnknown, nil) }

// end ends the claim with state s, stopping its renewal first.
func (c *Claim) end(s State, answer []byte) error {
	if c.ended.Swap(true) {
		return ErrEnded
	}
	l := c.l
	l.renewer.remove(c)
	defer l.ended()
	stored, err := l.store.End(context.Background(), c.key, c.fp, c.token, s, answer, l.terms)
	cs := l.counts
	switch {
	case errors.Is(err, ErrLost):
		cs.lost.Add(1)
		return err
	case err != nil:
		cs.storeErrors.Add(1)
		l.logStoreError("end", err)
		return err
	}
	switch stored {
	case StateNone:
		cs.released.Add(1)
	case StateKept:
		cs.kept.Add(1)
	case StateNotKept:
		cs.notKept.Add(1)
	case StateUnknown:
		cs.unknown.Add(1)
	}
	return nil
}

// Lost reports whether a renewal found the claim taken: its lease ran
// out (the store was unreachable for longer than the lease, say) and
// another request retook the key. Its end will then write nothing.
func (c *Claim) Lost() bool { return c.lost.Load() }

// Recorder returns a recorder of the answer as it streams to the client,
// which ends the claim when the answer ends (see Recorder). One per
// claim.
func (c *Claim) Recorder() *Recorder { return &Recorder{c: c} }

// Recorder keeps a copy of an answer as it is relayed, and ends its claim
// with it: Head, then Body for each piece, then Trailers if there are
// any, then End (Keep) or Abort. The phase (Layer.Phase) feeds it the
// upstream's answer as it came, before the route's response phases, and
// replays it through them again, so that the same request gets the same
// bytes. It copies; it never blocks nor writes to the store before End or
// Abort, so that keeping costs the client nothing.
// Past the layer's max_response it stops copying (and frees what it
// held): the answer then ends as not kept.
//
// It writes the answer in the form a store keeps (Answer.Encode's) as it
// comes, into one buffer: with a store that copies what it keeps (Local),
// a buffer of a pool, used again by the next answer.
//
// A Recorder is used by one goroutine at a time.
type Recorder struct {
	c      *Claim
	enc    *[]byte // the answer's encoding so far; nil before Head and past max_response
	status int
	headed bool
	size   int64 // as Answer.size counts it
	over   bool  // past max_response
	// The body's length starts at enc[bodyAt], and its bytes at
	// enc[bodyAt+lenSize]: the length written is the size hint's, set
	// right once the body ended (endBody).
	bodyAt, lenSize int
	bodyDone        bool
}

// encodings are the buffers Recorders write answers in, for stores that
// copy them (instant ones): an answer's encoding, used again by the next.
var encodings = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled is the largest buffer put back in encodings: a larger one,
// of a large answer, is left to the collector rather than held.
const maxPooled = 64 << 10

// Head records the response's status, reason phrase (HTTP/1.1's; nil
// for other wires) and fields, less the hop-by-hop ones (Connection and
// the fields it names, Keep-Alive, Proxy-Connection, Transfer-Encoding,
// TE, Upgrade). Interim (1xx) responses are not recorded: do not pass
// them. sizeHint, when > 0, is the body's length (Content-Length), to
// hold it in one piece.
func (r *Recorder) Head(status int, reason []byte, h *h1.Header, sizeHint int64) {
	r.headed = true
	r.status = status
	r.bodyDone = false
	if r.over {
		return
	}
	if r.enc == nil {
		r.enc = encodings.Get().(*[]byte)
	}
	b := append((*r.enc)[:0], answerMagic[:]...)
	b = binary.AppendUvarint(b, uint64(status))
	b = appendPart(b, reason)
	b, fields := appendEndToEnd(b, h)
	r.size = int64((&Answer{}).size() + len(reason) + fields)
	r.bodyAt = len(b)
	hint := max(sizeHint, 0)
	b = binary.AppendUvarint(b, uint64(hint))
	r.lenSize = len(b) - r.bodyAt
	if hint > 0 && r.size+hint <= r.c.l.maxResp {
		// Room for the body and the trailers' count.
		b = slices.Grow(b, int(hint)+1)
	}
	*r.enc = b
	r.check()
}

// Body records a piece of the body; p is copied.
func (r *Recorder) Body(p []byte) {
	if r.over || !r.headed {
		return
	}
	r.size += int64(len(p))
	if r.check(); !r.over {
		*r.enc = append(*r.enc, p...)
	}
}

// Trailers records the trailer fields.
func (r *Recorder) Trailers(h *h1.Header) {
	if r.over || !r.headed || r.bodyDone {
		return
	}
	r.endBody()
	b, fields := appendEndToEnd(*r.enc, h)
	*r.enc = b
	r.size += int64(fields)
	r.check()
}

// endBody writes the body's length as it came, in place of the size
// hint's, moving the body when the two take different numbers of bytes.
func (r *Recorder) endBody() {
	r.bodyDone = true
	b := *r.enc
	start := r.bodyAt + r.lenSize
	n := len(b) - start
	var lenBuf [binary.MaxVarintLen64]byte
	l := binary.AppendUvarint(lenBuf[:0], uint64(n))
	if d := len(l) - r.lenSize; d > 0 {
		b = append(b, make([]byte, d)...)
		copy(b[start+d:], b[start:start+n])
	} else if d < 0 {
		copy(b[start+d:], b[start:start+n])
		b = b[:len(b)+d]
	}
	copy(b[r.bodyAt:], l)
	*r.enc = b
}

// check notes an answer past max_response, dropping what was held.
func (r *Recorder) check() {
	if r.size > r.c.l.maxResp {
		r.over = true
		r.free()
	}
}

// free gives the recorder's buffer back to the pool.
func (r *Recorder) free() {
	if r.enc != nil && cap(*r.enc) <= maxPooled {
		*r.enc = (*r.enc)[:0]
		encodings.Put(r.enc)
	}
	r.enc = nil
}

// End ends the claim with the recorded answer, which ended whole (Keep).
// Call it once the answer's last byte went downstream, or, when the
// client went away, once the upstream's answer ended: the answer is the
// one the retry will get.
func (r *Recorder) End() error {
	switch {
	case !r.headed:
		return r.c.Unknown()
	case r.release():
		r.free()
		return r.c.Release()
	case r.over:
		return r.c.end(StateNotKept, nil)
	}
	if !r.bodyDone {
		r.endBody()
		*r.enc = append(*r.enc, 0) // no trailers
	}
	enc := *r.enc
	if _, ok := r.c.l.store.(instant); !ok {
		// The store may keep the bytes it is given: a copy of its own.
		enc = slices.Clone(enc)
	}
	err := r.c.end(StateKept, enc)
	r.free()
	return err
}

// release reports whether the answer's status frees the key (the
// layer's release statuses).
func (r *Recorder) release() bool { return r.c.l.release.Has(r.status) }

// Abort ends the claim of an answer that broke off before its end (the
// upstream reset, or went silent): the request was processed, as far as
// the upstream got, and its answer is lost. The outcome is unknown,
// unless the status received is in the release set, which frees the key
// as a whole answer of that status would.
func (r *Recorder) Abort() error {
	r.free()
	if r.headed && r.release() {
		return r.c.Release()
	}
	return r.c.Unknown()
}
