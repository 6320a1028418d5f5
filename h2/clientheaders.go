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
	cc.mu.Unlock()
	if idle {
		return connErr{http2.ErrCodeProtocol, "HEADERS on a stream the client did not open"} // §5.1, §8.4
	}
	cc.resp.reset(trailers)
	return cc.startBlock(f, nil)
}

// field checks a response's field (endpoint).
func (cc *ClientConn) field(f hpack.HeaderField) bool {
	cc.resp.field(f)
	return cc.resp.bad == ""
}

// endBlock acts on a whole, decoded block: an informational or final
// response header block, or trailers (endpoint).
func (cc *ClientConn) endBlock() error {
	b := &cc.blk
	id := b.id
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cs, _ := cc.streams[id].(*ClientStream)
	if cs == nil {
		// Closed (we reset it, or it failed): decoded for the HPACK state
		// only. Charged, since answering costs nothing to the server.
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

// respCheck checks a response header block or trailers field by field, then
// as a whole (finish), against RFC 9113 §8.2 and §8.3.2: what a proxy reads
// must be what the next hop reads, so the first violation makes the block
// malformed.
type respCheck struct {
	trailers   bool
	sawRegular bool
	status     string
	length     int64 // content-length, -1 when absent
	bad        string
}

func (rc *respCheck) reset(trailers bool) {
	*rc = respCheck{trailers: trailers, length: -1}
}

func (rc *respCheck) field(f hpack.HeaderField) {
	if rc.bad != "" {
		return
	}
	if !validValue(f.Value) {
		rc.bad = "invalid value of field " + f.Name
		return
	}
	if len(f.Name) > 0 && f.Name[0] == ':' {
		switch {
		case rc.trailers:
			rc.bad = "pseudo-header field in trailers" // §8.1
		case rc.sawRegular:
			rc.bad = "pseudo-header field after a regular one" // §8.3
		case f.Name != ":status":
			rc.bad = "unexpected pseudo-header field " + f.Name // §8.3.2
		case rc.status != "":
			rc.bad = "duplicate :status"
		default:
			rc.status = f.Value
			if rc.status == "" {
				rc.bad = "empty :status"
			}
		}
		return
	}
	rc.sawRegular = true
	if !validName(f.Name) {
		rc.bad = "invalid field name" // §8.2.1: uppercase included
		return
	}
	switch f.Name {
	// §8.2.2: connection-specific fields, and TE, allowed in requests only.
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te":
		rc.bad = "connection-specific field " + f.Name
	case "content-length":
		if rc.trailers {
			return
		}
		n, ok := parseLength(f.Value)
		if !ok || (rc.length >= 0 && rc.length != n) {
			rc.bad = "invalid content-length"
			return
		}
		rc.length = n
	}
}

// finish returns the reason the block is malformed, or "".
func (rc *respCheck) finish() string {
	if rc.bad != "" || rc.trailers {
		return rc.bad
	}
	s := rc.status
	if len(s) != 3 || s[0] < '1' || s[0] > '5' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9' {
		return "missing or invalid :status"
	}
	if s == "101" {
		return "101 does not exist in HTTP/2" // §8.6
	}
	return ""
}
