package h2

import (
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerBlock is the header block being read, either end's: a HEADERS
// frame and the CONTINUATION frames after it, decoded as they come so that
// nothing but the decoded fields, within the header list limit, is held.
// What the fields must be is the end's to check (endpoint.field).
type headerBlock struct {
	id     uint32 // 0 between blocks
	end    bool   // END_STREAM on the HEADERS frame
	fields []hpack.HeaderField
	blockBounds
}

// blockBounds bounds a header block being read, either end's, whatever
// its frames (CVE-2024-27316, CVE-2023-45288): the wire bytes and frames
// of the block, and its decoded size against the list limit.
type blockBounds struct {
	wire   int // fragment bytes so far
	frames int
	size   uint32 // header list size so far (§6.5.2: name + value + 32 each)
	over   bool   // past the list limit: fields dropped, decoding goes on for the HPACK state
}

// feed counts a fragment of the block and decodes it with dec; done once
// the block ended and was decoded whole. Wire bytes past twice the list
// limit, or frames past maxFrames, are a connection error.
func (b *blockBounds) feed(dec *hpack.Decoder, frag []byte, ended bool, maxList uint32, maxFrames int) (done bool, err error) {
	b.frames++
	b.wire += len(frag)
	if b.wire > 2*int(maxList) || b.frames > maxFrames {
		return false, connErr{http2.ErrCodeEnhanceYourCalm, "header block too large"}
	}
	if _, err := dec.Write(frag); err != nil {
		return false, connErr{http2.ErrCodeCompression, "HPACK: " + err.Error()} // §4.3
	}
	if !ended {
		return false, nil
	}
	if err := dec.Close(); err != nil {
		return false, connErr{http2.ErrCodeCompression, "HPACK: " + err.Error()}
	}
	return true, nil
}

// admit counts a decoded field against the list limit. It reports false,
// over set, once the block is past it: the caller drops the fields kept
// and stops dec emitting (decoding goes on, for the HPACK state).
func (b *blockBounds) admit(f hpack.HeaderField, maxList uint32, dec *hpack.Decoder) bool {
	if b.over {
		return false
	}
	if sz := f.Size(); sz <= maxList-b.size {
		b.size += sz
		return true
	}
	b.over = true
	dec.SetEmitEnabled(false)
	return false
}

// startBlock begins reading the header block of f, its fields decoded
// into fields (which may hold room for them).
func (c *core) startBlock(f *http2.HeadersFrame, fields []hpack.HeaderField) error {
	c.blk = headerBlock{id: f.StreamID, end: f.StreamEnded(), fields: fields}
	c.dec.SetEmitEnabled(true)
	return c.feed(f.HeaderBlockFragment(), f.HeadersEnded())
}

// feed decodes one fragment of the block. The block is bounded whatever its
// frames (CVE-2024-27316, CVE-2023-45288): its wire bytes by twice the
// header list limit, its frame count too, so that neither large nor endless
// empty CONTINUATION frames are read past the bound; its decoded size by the
// limit (an HPACK bomb is a small block that decodes to a huge list). The
// end acts on the block once whole.
func (c *core) feed(frag []byte, ended bool) error {
	b := &c.blk
	if done, err := b.feed(c.dec, frag, ended, c.maxHeaderList, c.maxBlockFrames()); !done {
		return err
	}
	err := c.end.endBlock()
	b.id, b.fields = 0, nil
	return err
}

// onField is the decoder's emit function.
func (c *core) onField(f hpack.HeaderField) {
	b := &c.blk
	if !b.admit(f, c.maxHeaderList, c.dec) {
		clear(b.fields)
		b.fields = b.fields[:0]
		return
	}
	if c.end.field(f) {
		b.fields = append(b.fields, f)
	}
}

// reqBlock is what a server keeps of a request header block being read,
// beside the core's headerBlock.
type reqBlock struct {
	check   *fieldCheck // from checks while a block is read: a parked connection holds none
	st      *Stream     // the stream the block opens, if a request's: its fields go in st.hdr
	selfDep bool        // a priority that depends on its own stream (§5.3.1)
}

// checks holds the field checks of blocks being read, 128 bytes that a
// connection would otherwise keep while it idles.
var checks = sync.Pool{New: func() any { return new(fieldCheck) }}

// onHeaders begins a request's header block, or its trailers (endpoint).
func (c *Conn) onHeaders(f *http2.HeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return connErr{http2.ErrCodeProtocol, "even stream id from a client"} // §5.1.1
	}
	c.mu.Lock()
	trailers := c.streams[id] != nil
	c.mu.Unlock()
	check := c.req.check
	if check == nil {
		check = checks.Get().(*fieldCheck)
	}
	check.reset(trailers, false)
	c.req = reqBlock{check: check, selfDep: f.HasPriority() && f.Priority.StreamDep == id}
	var fields []hpack.HeaderField
	if !trailers {
		c.req.st = newStream()
		fields = c.req.st.hdr[:0]
	}
	return c.startBlock(f, fields)
}

// field checks a request's field (endpoint).
func (c *Conn) field(f hpack.HeaderField) bool {
	c.req.check.field(f)
	return c.req.check.bad == ""
}

// endBlock acts on a whole, decoded block: a new stream, trailers, or a
// block to drop.
func (c *Conn) endBlock() error {
	err := c.endRequestBlock()
	if c.req.check != nil {
		checks.Put(c.req.check)
	}
	if c.req.st != nil {
		c.req.st.recycle() // the block opened no stream
	}
	c.req = reqBlock{}
	return err
}

func (c *Conn) endRequestBlock() error {
	b, r := &c.blk, &c.req
	id := b.id
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.streams[id]; p != nil { // trailers (§8.1)
		st := p.base()
		switch {
		case st.remoteEnded:
			return streamErr{id, http2.ErrCodeStreamClosed, "HEADERS after END_STREAM"} // §5.1: half-closed (remote)
		case !b.end:
			return streamErr{id, http2.ErrCodeProtocol, "trailers without END_STREAM"}
		case b.over:
			return streamErr{id, http2.ErrCodeProtocol, "trailers over the header list limit"}
		case r.selfDep:
			return streamErr{id, http2.ErrCodeProtocol, "stream depends on itself"}
		}
		if bad := r.check.finish(); bad != "" {
			return streamErr{id, http2.ErrCodeProtocol, "malformed trailers: " + bad}
		}
		st.trailers = b.fields
		b.fields = nil
		return c.remoteEnd(st)
	}
	if id <= c.maxID {
		switch c.closedBy(id) {
		case closedByUs:
			return nil // §5.1: frames in flight when we reset it
		case closedNormally:
			return connErr{http2.ErrCodeStreamClosed, "HEADERS on a closed stream"}
		}
		return connErr{http2.ErrCodeProtocol, "stream id not increasing"} // §5.1.1
	}
	c.maxID = id
	if c.goAway {
		return nil // §6.8: beyond the last stream id announced
	}
	if r.selfDep {
		return streamErr{id, http2.ErrCodeProtocol, "stream depends on itself"} // §5.3.1
	}
	if b.over {
		// §10.5.1: a header section too large may be answered 431.
		c.queue = append(c.queue, ctrl{kind: cStatus, id: id, val: 431})
		if !b.end {
			c.queue = append(c.queue, ctrl{kind: cRST, id: id, val: uint32(http2.ErrCodeNo)})
		}
		c.remember(id, closedByUs)
		return nil
	}
	if bad := r.check.finish(); bad != "" {
		c.log.Debug("h2: malformed request", "stream", id, "reason", bad)
		return streamErr{id, http2.ErrCodeProtocol, "malformed request: " + bad} // §8.1.1
	}
	if len(c.streams) >= int(c.maxStreams) || c.handlers >= int(c.maxStreams) {
		// §5.1.2. Before our SETTINGS are acknowledged the client may not
		// know the limit: refusals count only after.
		if c.settingsAcked && !c.refusals.take(1) {
			return connErr{http2.ErrCodeEnhanceYourCalm, "too many streams refused"}
		}
		return streamErr{id, http2.ErrCodeRefusedStream, "over SETTINGS_MAX_CONCURRENT_STREAMS"}
	}
	st := r.st
	st.init(c, id, b.fields, r.check.length)
	if len(c.streams) == 0 && !c.ending && (c.idleTimeout > 0 || c.parkAfter > 0) {
		c.idleBy, c.parkBy = time.Time{}, time.Time{}
		c.nc.SetReadDeadline(time.Time{})
	}
	if c.streams == nil {
		c.streams = make(map[uint32]peer)
	}
	c.streams[id] = st
	c.handlers++
	c.lastID = id
	c.glitches.give(glitchPerWork)
	if b.end {
		st.remoteEnded, st.noBody = true, true
	}
	c.wg.Add(1)
	r.st = nil // the handler's now, recycled when it is done
	spawn(st)
	return nil
}
