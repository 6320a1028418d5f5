package h3

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/quic-go/quic-go/quicvarint"
)

// Frame types (RFC 9114 §7.2, §11.2.1).
const (
	frameData        = 0x00
	frameHeaders     = 0x01
	frameCancelPush  = 0x03
	frameSettings    = 0x04
	framePushPromise = 0x05
	frameGoAway      = 0x07
	frameMaxPushID   = 0x0d
)

// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
const (
	streamControl      = 0x00
	streamPush         = 0x01
	streamQPACKEncoder = 0x02
	streamQPACKDecoder = 0x03
)

// Settings identifiers (RFC 9114 §7.2.4.1, RFC 9204 §5).
const (
	settingQPACKMaxTableCapacity = 0x01
	settingMaxFieldSectionSize   = 0x06
	settingQPACKBlockedStreams   = 0x07
)

// ErrCode is an HTTP/3 error code (RFC 9114 §8.1), carried in
// CONNECTION_CLOSE, RESET_STREAM and STOP_SENDING.
type ErrCode uint64

// The HTTP/3 error codes (RFC 9114 §8.1, RFC 9204 §6).
const (
	ErrNoError              ErrCode = 0x100
	ErrGeneralProtocol      ErrCode = 0x101
	ErrInternal             ErrCode = 0x102
	ErrStreamCreation       ErrCode = 0x103
	ErrClosedCriticalStream ErrCode = 0x104
	ErrFrameUnexpected      ErrCode = 0x105
	ErrFrame                ErrCode = 0x106
	ErrExcessiveLoad        ErrCode = 0x107
	ErrID                   ErrCode = 0x108
	ErrSettings             ErrCode = 0x109
	ErrMissingSettings      ErrCode = 0x10a
	// ErrRequestRejected: the request was not processed at all; the
	// client may send it again, whatever its method (RFC 9114 §8.1).
	ErrRequestRejected   ErrCode = 0x10b
	ErrRequestCancelled  ErrCode = 0x10c
	ErrRequestIncomplete ErrCode = 0x10d
	ErrMessage           ErrCode = 0x10e
	ErrConnect           ErrCode = 0x10f
	ErrVersionFallback   ErrCode = 0x110
	ErrQPACKDecompress   ErrCode = 0x200
	ErrQPACKEncoder      ErrCode = 0x201
	ErrQPACKDecoder      ErrCode = 0x202
)

var errNames = map[ErrCode]string{
	ErrNoError: "H3_NO_ERROR", ErrGeneralProtocol: "H3_GENERAL_PROTOCOL_ERROR", ErrInternal: "H3_INTERNAL_ERROR",
	ErrStreamCreation: "H3_STREAM_CREATION_ERROR", ErrClosedCriticalStream: "H3_CLOSED_CRITICAL_STREAM",
	ErrFrameUnexpected: "H3_FRAME_UNEXPECTED", ErrFrame: "H3_FRAME_ERROR", ErrExcessiveLoad: "H3_EXCESSIVE_LOAD",
	ErrID: "H3_ID_ERROR", ErrSettings: "H3_SETTINGS_ERROR", ErrMissingSettings: "H3_MISSING_SETTINGS",
	ErrRequestRejected: "H3_REQUEST_REJECTED", ErrRequestCancelled: "H3_REQUEST_CANCELLED",
	ErrRequestIncomplete: "H3_REQUEST_INCOMPLETE", ErrMessage: "H3_MESSAGE_ERROR", ErrConnect: "H3_CONNECT_ERROR",
	ErrVersionFallback: "H3_VERSION_FALLBACK", ErrQPACKDecompress: "QPACK_DECOMPRESSION_FAILED",
	ErrQPACKEncoder: "QPACK_ENCODER_STREAM_ERROR", ErrQPACKDecoder: "QPACK_DECODER_STREAM_ERROR",
}

func (c ErrCode) String() string {
	if n, ok := errNames[c]; ok {
		return n
	}
	return fmt.Sprintf("H3 error 0x%x", uint64(c))
}

// ConnError is an error of the whole connection: it is closed with Code.
type ConnError struct {
	Code ErrCode
	Msg  string
}

func (e *ConnError) Error() string { return "h3: connection error " + e.Code.String() + ": " + e.Msg }

// StreamError is an error of one request stream: it is reset with Code.
type StreamError struct {
	Code ErrCode
	Msg  string
}

func (e *StreamError) Error() string { return "h3: stream error " + e.Code.String() + ": " + e.Msg }

// frameHeader is a frame's type and payload length.
type frameHeader struct {
	typ uint64
	len uint64
}

// readFrameHeader reads a frame's type and length (RFC 9114 §7.1). It
// returns io.EOF when the stream ends cleanly before the frame's first
// byte, and io.ErrUnexpectedEOF when it ends inside the header.
func readFrameHeader(r *bufio.Reader) (frameHeader, error) {
	typ, err := quicvarint.Read(r)
	if err != nil {
		return frameHeader{}, err
	}
	n, err := quicvarint.Read(r)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return frameHeader{typ: typ, len: n}, err
}

// peekFrameHeader is readFrameHeader that takes nothing from r until the
// header has come whole: a wait cut short by a deadline leaves r where
// it was.
func peekFrameHeader(r *bufio.Reader) (frameHeader, error) {
	b, err := r.Peek(1)
	if err != nil {
		return frameHeader{}, err // io.EOF: the stream ended between frames
	}
	n1 := 1 << (b[0] >> 6)
	b, err = r.Peek(n1 + 1)
	if err != nil {
		return frameHeader{}, unexpected(err)
	}
	n2 := 1 << (b[n1] >> 6)
	b, err = r.Peek(n1 + n2)
	if err != nil {
		return frameHeader{}, unexpected(err)
	}
	typ, _, _ := quicvarint.Parse(b)
	n, _, _ := quicvarint.Parse(b[n1:])
	r.Discard(n1 + n2)
	return frameHeader{typ: typ, len: n}, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// reservedHTTP2 reports whether typ is a frame type HTTP/2 has and HTTP/3
// reserves: receiving one is a connection error (RFC 9114 §7.2.8).
func reservedHTTP2(typ uint64) bool {
	return typ == 0x02 || typ == 0x06 || typ == 0x08 || typ == 0x09
}

// appendFrameHeader appends a frame header of typ for a payload of n bytes.
func appendFrameHeader(b []byte, typ uint64, n int) []byte {
	b = quicvarint.Append(b, typ)
	return quicvarint.Append(b, uint64(n))
}

// settings are the SETTINGS a peer sent.
type settings struct {
	maxFieldSection uint64 // 0: unlimited
}

// maxSettingsPayload bounds the SETTINGS frame sluice reads: a few dozen
// identifiers are all any peer sends.
const maxSettingsPayload = 4 << 10

// parseSettings reads a SETTINGS payload (RFC 9114 §7.2.4): pairs of
// varints, each identifier at most once; the HTTP/2 settings HTTP/3
// reserves are an error (§7.2.4.1). Unknown identifiers are ignored.
func parseSettings(p []byte) (settings, error) {
	var s settings
	seen := make(map[uint64]bool)
	for len(p) > 0 {
		id, n, err := quicvarint.Parse(p)
		if err != nil {
			return s, &ConnError{Code: ErrFrame, Msg: "truncated SETTINGS identifier"}
		}
		p = p[n:]
		v, n, err := quicvarint.Parse(p)
		if err != nil {
			return s, &ConnError{Code: ErrFrame, Msg: "truncated SETTINGS value"}
		}
		p = p[n:]
		if seen[id] {
			return s, &ConnError{Code: ErrSettings, Msg: fmt.Sprintf("setting 0x%x sent twice", id)}
		}
		seen[id] = true
		switch id {
		case 0x02, 0x03, 0x04, 0x05:
			return s, &ConnError{Code: ErrSettings, Msg: fmt.Sprintf("HTTP/2 setting 0x%x in HTTP/3", id)}
		case settingMaxFieldSectionSize:
			s.maxFieldSection = v
		}
	}
	return s, nil
}

// appendSettings appends sluice's SETTINGS frame: no QPACK dynamic table
// (capacity 0, no blocked streams: the qpack package encodes and decodes
// with the static table only, so a peer can make sluice keep no state for
// its header blocks), and the largest field section it accepts.
func appendSettings(b []byte, maxFieldSection uint64) []byte {
	var p []byte
	p = quicvarint.Append(p, settingQPACKMaxTableCapacity)
	p = quicvarint.Append(p, 0)
	p = quicvarint.Append(p, settingQPACKBlockedStreams)
	p = quicvarint.Append(p, 0)
	p = quicvarint.Append(p, settingMaxFieldSectionSize)
	p = quicvarint.Append(p, maxFieldSection)
	b = appendFrameHeader(b, frameSettings, len(p))
	return append(b, p...)
}

// appendGoAway appends a GOAWAY frame carrying id: for a server, the first
// request stream it will not process (RFC 9114 §5.2).
func appendGoAway(b []byte, id uint64) []byte {
	b = appendFrameHeader(b, frameGoAway, quicvarint.Len(id))
	return quicvarint.Append(b, id)
}

// parseGoAway reads a GOAWAY payload: one varint.
func parseGoAway(p []byte) (uint64, error) {
	id, n, err := quicvarint.Parse(p)
	if err != nil || n != len(p) {
		return 0, &ConnError{Code: ErrFrame, Msg: "malformed GOAWAY"}
	}
	return id, nil
}

// checkEncoderStream reads the instructions of a peer's QPACK encoder
// stream (RFC 9204 §4.3). sluice announced a dynamic table capacity of 0,
// so the only valid instruction is Set Dynamic Table Capacity 0; any
// insertion, or a capacity above 0, is QPACK_ENCODER_STREAM_ERROR. It
// returns at the stream's end or at the first error.
func checkEncoderStream(r io.ByteReader) error {
	for {
		b, err := r.ReadByte()
		if err != nil {
			return err
		}
		if b&0xe0 != 0x20 {
			return &ConnError{Code: ErrQPACKEncoder, Msg: "insertion into a dynamic table of capacity 0"}
		}
		v, err := readPrefixInt(r, b, 5)
		if err != nil {
			return err
		}
		if v != 0 {
			return &ConnError{Code: ErrQPACKEncoder, Msg: "dynamic table capacity above the 0 announced"}
		}
	}
}

// readPrefixInt reads a QPACK prefixed integer (RFC 9204 §4.1.1, RFC 7541
// §5.1) whose first byte is first, with an n-bit prefix.
func readPrefixInt(r io.ByteReader, first byte, n uint) (uint64, error) {
	mask := byte(1<<n - 1)
	v := uint64(first & mask)
	if v < uint64(mask) {
		return v, nil
	}
	var m uint
	for {
		b, err := r.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if m >= 62 {
			return 0, errors.New("h3: QPACK integer too large")
		}
		v += uint64(b&0x7f) << m
		m += 7
		if b&0x80 == 0 {
			return v, nil
		}
	}
}
