package proxy

import (
	"crypto/rand"
	"encoding/binary"
	"sync/atomic"
)

// RequestIDHeader is the field that carries a request's id
// (Forwarding.NoRequestID): sent upstream, returned to the client, logged.
const RequestIDHeader = "X-Request-Id"

var requestIDName = []byte(RequestIDHeader)

// maxRequestID bounds the length of an id a trusted peer sent that is kept;
// a longer one is replaced.
const maxRequestID = 200

// requestIDLen is the length of the ids sluice makes: 32 hex digits, the
// size of 16 random bytes in hex.
const requestIDLen = 32

// requestIDs makes ids unique to this process and, with high probability,
// across processes: the first 16 hex digits are 64 random bits drawn once
// per process, the last 16 a counter. Drawing 16 random bytes for every
// request would cost a system call each (crypto/rand) or a lock; the
// counter costs one atomic add. The ids are names, not secrets: the next
// one is easy to guess from the last.
var requestIDs struct {
	prefix [16]byte
	n      atomic.Uint64
}

func init() {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand.Read panics rather than return an error)
	appendHex(requestIDs.prefix[:0], binary.BigEndian.Uint64(b[:]))
}

// appendHex appends v as 16 lower-case hex digits.
func appendHex(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, digits[(v>>uint(shift))&15])
	}
	return dst
}

// RequestID returns the request's id: the X-Request-Id a trusted peer
// (Forwarding.Trusted) sent, or one sluice made; nil when request ids are
// off (Forwarding.NoRequestID). The bytes are valid until the session
// ends and must not be changed.
func (s *Session) RequestID() []byte { return s.reqID }

// assignRequestID gives the request its id, unless ids are off or it has
// one. With incoming, a trusted peer's X-Request-Id is kept when it is
// neither empty nor longer than maxRequestID; otherwise (a malformed head
// has no fields to trust) sluice makes one.
func (s *Session) assignRequestID(incoming bool) {
	if s.reqID != nil || s.srv.Forwarding.NoRequestID {
		return
	}
	if incoming && s.c.trusted {
		if v := s.Request.Header.Get(RequestIDHeader); len(v) > 0 && len(v) <= maxRequestID {
			s.reqID = v
			return
		}
	}
	b := append(s.idBuf[:0], requestIDs.prefix[:]...)
	s.reqID = appendHex(b, requestIDs.n.Add(1))
	s.idOwn = true
}
