package h2

import (
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// onHeaders begins a response header block, or its trailers (endpoint).
func (cc *ClientConn) onHeaders(f *http2.HeadersFrame) error {
	id := f.StreamID
	cc.mu.Lock()
	idle := cc.idle(id)
	p := cc.streams[id]
	trailers := p != nil && p.base().gotHead
	var fields []hpack.HeaderField
	cs, _ := p.(*ClientStream)
	if cs != nil {
		fields = cs.nextFields()
	}
	cc.decoding = cs // until endBlock: fields are cs's
	cc.mu.Unlock()
	if idle {
		return connErr{http2.ErrCodeProtocol, "HEADERS on a stream the client did not open"} // §5.1, §8.4
	}
	cc.resp.reset(trailers, true)
	return cc.startBlock(f, fields)
}

// field checks a response's field (endpoint).
func (cc *ClientConn) field(f hpack.HeaderField) bool {
	cc.resp.field(f)
	return cc.resp.bad == ""
}

// endBlock acts on a whole, decoded block: an informational or final
// response header block, or trailers (endpoint).
func (cc *ClientConn) endBlock() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	err := cc.takeBlock()
	if cs := cc.decoding; cs != nil {
		// The block's fields are in place, or dropped: a stream released
		// while it was decoded goes now.
		cc.decoding, cc.blk.fields = nil, nil
		cc.recycle(cs)
	}
	return err
}

// takeBlock is endBlock's work on the block. The lock is held.
func (cc *ClientConn) takeBlock() error {
	b := &cc.blk
	id := b.id
	cs, _ := cc.streams[id].(*ClientStream)
	if cs == nil {
		// Closed: decoded for the HPACK state only.
		if cc.closedBy(id) == closedNormally {
			// §5.1: the stream ended both ways, or the server reset it.
			return connErr{http2.ErrCodeStreamClosed, "HEADERS on a closed stream"}
		}
		// We reset it (or it failed), or it is no longer remembered:
		// frames in flight. Charged, since answering costs the server
		// nothing.
		if !cc.glitches.take(1) {
			return connErr{http2.ErrCodeEnhanceYourCalm, "too many control frames"}
		}
		return nil
	}
	if cs.remoteEnded {
		return streamErr{id, http2.ErrCodeStreamClosed, "HEADERS after END_STREAM"} // §5.1
	}
	if b.over {
		return streamErr{id, http2.ErrCodeProtocol, "response header list too large"}
	}
	if bad := cc.resp.finish(); bad != "" {
		return streamErr{id, http2.ErrCodeProtocol, "malformed response: " + bad} // §8.1.1
	}
	fields := b.fields
	b.fields = nil
	cs.took(fields)
	if cs.gotHead { // trailers (§8.1)
		if !b.end {
			return streamErr{id, http2.ErrCodeProtocol, "trailers without END_STREAM"}
		}
		cs.trailers = fields
		return cc.remoteEnd(&cs.stream)
	}
	status := cc.resp.status
	if status[0] == '1' {
		// §8.1: informational blocks precede the final one and cannot end
		// the stream.
		if b.end {
			return streamErr{id, http2.ErrCodeProtocol, "informational response with END_STREAM"}
		}
		cs.interim++
		cs.answered = true
		if cs.interim > maxInterim {
			return streamErr{id, http2.ErrCodeProtocol, "too many informational responses"}
		}
		cs.blocks = append(cs.blocks, fields)
		poke(cs.rwake)
		return nil
	}
	cs.gotHead, cs.answered = true, true
	cs.length = cc.resp.length
	cs.noContent = cs.head || status == "204" || status == "304"
	cs.blocks = append(cs.blocks, fields)
	poke(cs.rwake)
	if b.end {
		return cc.remoteEnd(&cs.stream)
	}
	return nil
}
