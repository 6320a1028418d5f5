package idempotency

import (
	"context"
	"sync"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// Phase returns the layer as a route phase (a proxy.RequestFilter), which
// is how the proxy's main line takes it: for a request of the layer's
// methods that carries the key (or must), it reads the body whole for its
// digest (at most MaxRequest bytes, else 413), asks Begin, and then
//
//   - answers with the layer's answer: a kept answer is replayed as the
//     upstream's response it was (through the route's response phases,
//     so that the same request gets the same bytes); the layer's own
//     answers (400, 409, 422, 502, 503) are sluice's;
//   - or forwards the request under its claim, marked to reach the
//     upstream at most once (proxy.Session.Once), its answer recorded as
//     it is relayed, read to its end even if the client leaves
//     (proxy.Session.Tee), and the claim ended by how the request ends: a
//     whole answer kept (or released, for the release statuses), an
//     answer cut short or no answer at all after a try that may have
//     reached the upstream kept as outcome unknown, no try that did
//     released.
//
// The access log line says what became of the request (idempotency=...).
func (l *Layer) Phase() proxy.RequestFilter { return phase{l} }

type phase struct{ l *Layer }

func (p phase) RequestFilter(s *proxy.Session) *proxy.Response {
	l := p.l
	req := &s.Request
	if !l.Handles(req.Method()) {
		return nil
	}
	at := req.Header.Index(l.header)
	if at < 0 && !l.required {
		return nil // not the layer's: no need to read the body
	}
	body, err := s.ReadBody(l.maxReq)
	if err != nil {
		return s.ErrorResponse(err)
	}
	if len(body) == 0 {
		body = nil
	}
	// The body is in memory: digested in one step, without a BodyDigest.
	// A claim is made in the tee that will end it, from tees.
	t := tees.Get().(*tee)
	t.s = s
	d := l.begin(context.Background(), &Request{Method: req.Method(), Target: req.Target(),
		Header: &req.Header, ClientIP: s.ClientIP, body: body, keyAt: at + 1}, &t.claim)
	if d.Outcome != Pass {
		s.Note("idempotency", d.Outcome.String())
	}
	if d.Claim == nil {
		t.free()
	}
	switch {
	case d.Answer != nil:
		return response(d.Answer, d.Outcome == Replayed)
	case d.Claim != nil:
		s.Once()
		t.rec.c = &t.claim
		s.Tee(t, true)
	case d.Outcome == Bypassed:
		// Without the layer, the upstream is not trusted to deduplicate.
		s.Once()
	}
	return nil
}

// response is a as the proxy writes it: a kept answer replayed as the
// upstream's response it was, or the layer's own.
func response(a *Answer, kept bool) *proxy.Response {
	r := &proxy.Response{Status: a.Status, Reason: a.Reason, Body: a.Body, AsUpstream: kept}
	r.Header.CopyFrom(&a.Header)
	r.Trailers.CopyFrom(&a.Trailer)
	return r
}

// tee records the upstream's answer of a claimed request, and ends its
// claim as the request ends. Once it has ended the claim (its End or
// Abort, the last call a ResponseTee gets), nothing refers to it (the
// renewer let go of the claim first), and it goes back to tees.
type tee struct {
	s     *proxy.Session
	claim Claim
	rec   Recorder // the claim's (Claim.Recorder), in the tee's allocation
	head  bool
}

func (t *tee) Head(resp *h1.Response) {
	t.head = true
	size := int64(-1)
	if v := resp.Header.Get("Content-Length"); v != nil {
		if n, ok := h1.ParseDecimal(v); ok {
			size = n
		}
	}
	t.rec.Head(resp.Status, resp.Reason(), &resp.Header, size)
}

func (t *tee) Body(p []byte) { t.rec.Body(p) }

func (t *tee) End(trailers *h1.Header) {
	if trailers != nil {
		t.rec.Trailers(trailers)
	}
	t.end((*Recorder).End)
}

// Abort ends the claim of a request without a whole answer: one cut short
// (Recorder.Abort), or none at all, which is unknown when any try may have
// reached the upstream and released when none did.
func (t *tee) Abort() {
	if t.head {
		t.end((*Recorder).Abort)
		return
	}
	for i := range t.s.Attempts {
		if !t.s.Attempts[i].Unsent() {
			t.end(func(r *Recorder) error { return r.c.Unknown() })
			return
		}
	}
	t.end(func(r *Recorder) error { return r.c.Release() })
}

// end ends the claim with how: at once with a store that does no I/O;
// else in a goroutine, since the store's round trip is not the client's
// to wait for (the layer waits for it as it closes). The tee then goes
// back to tees.
func (t *tee) end(how func(*Recorder) error) {
	if _, ok := t.claim.l.store.(instant); ok {
		how(&t.rec)
		t.free()
		return
	}
	go func() {
		how(&t.rec)
		t.free()
	}()
}

// tees are the phase's tees, each used again by a later claimed request
// once its claim has ended: a tee (its claim and recorder) is a few
// hundred bytes a keyed request would otherwise allocate, and leave to
// the collector.
var tees = sync.Pool{New: func() any { return new(tee) }}

// free puts t back in tees, zeroed.
func (t *tee) free() {
	*t = tee{}
	tees.Put(t)
}
