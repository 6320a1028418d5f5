package quicshare

import (
	"crypto/rand"
	"hash/maphash"

	"github.com/quic-go/quic-go"
)

// The connection IDs a process hands out: IDLen bytes, the process's tag
// first, then random bytes, then a check of both keyed by a secret of the
// process, which tells its own IDs from the destination IDs clients choose
// for their first Initial packets (a random one passes with a chance of
// one in 2^32: the tag's 2^8 times the check's 2^24).
const (
	IDLen    = 10
	randLen  = 6
	checkLen = IDLen - 1 - randLen
)

// ids makes and recognizes one process's connection IDs. Its methods
// are safe for concurrent use.
type ids struct {
	tag  byte
	seed maphash.Seed
}

func newIDs(tag byte) *ids { return &ids{tag: tag, seed: maphash.MakeSeed()} }

// check returns the check bytes of an ID's tag and random bytes.
func (x *ids) check(head []byte) [checkLen]byte {
	h := maphash.Bytes(x.seed, head)
	return [checkLen]byte{byte(h), byte(h >> 8), byte(h >> 16)}
}

// GenerateConnectionID returns a new ID of the process (quic-go's
// ConnectionIDGenerator).
func (x *ids) GenerateConnectionID() (quic.ConnectionID, error) {
	var b [IDLen]byte
	b[0] = x.tag
	if _, err := rand.Read(b[1 : 1+randLen]); err != nil {
		return quic.ConnectionID{}, err
	}
	c := x.check(b[:1+randLen])
	copy(b[1+randLen:], c[:])
	return quic.ConnectionIDFromBytes(b[:]), nil
}

// ConnectionIDLen returns IDLen (quic-go's ConnectionIDGenerator).
func (x *ids) ConnectionIDLen() int { return IDLen }

// valid reports whether id is one of the process's.
func (x *ids) valid(id []byte) bool {
	if len(id) != IDLen || id[0] != x.tag {
		return false
	}
	return x.check(id[:1+randLen]) == [checkLen]byte(id[1+randLen:])
}

// own reports whether the QUIC packet a datagram p begins with is for a
// connection of the process: its destination connection ID is one the
// process handed out (RFC 9000 §17.2: a long header's ID follows the
// version and its length byte; §17.3: a short header's follows the first
// byte, its length known only to the receiver). Anything else, a new
// client's Initial included, is not.
func (x *ids) own(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	if p[0]&0x80 != 0 { // long header
		if len(p) < 6+IDLen || p[5] != IDLen {
			return false
		}
		return x.valid(p[6 : 6+IDLen])
	}
	if len(p) < 1+IDLen {
		return false
	}
	return x.valid(p[1 : 1+IDLen])
}
