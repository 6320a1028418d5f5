package quicshare

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
)

// The relay is a Unix socket pair of type SOCK_SEQPACKET between the old
// process and the new one: messages keep their bounds, the old process's
// writes wait while the new one's queue is full (nothing is dropped), and
// the new process reads the end of the relay when the old one has closed
// its side, or exited. Its messages:
//
//	hello:    'H', tag...            the tags of the processes alive (the old one's first)
//	datagram: 'D', ipLen (4 or 16), ip, port (2, big endian),
//	          oobLen (2, big endian), oob, payload
//
// A datagram message is one the socket received: its sender's address as
// the socket gave it, its control messages (ECN, the destination address)
// as the kernel wrote them, and its bytes.
const (
	msgHello    = 'H'
	msgDatagram = 'D'
)

// maxRelayMessage bounds a relay message: a datagram's header, control
// messages and payload, which the reading side gives at most a packet
// buffer of quic-go (1452 bytes) anyway.
const maxRelayMessage = 64 << 10

var errBadMessage = errors.New("quicshare: malformed relay message")

// appendDatagram appends the relay message of m, a datagram the socket
// received.
func appendDatagram(b []byte, m *ipv4.Message) ([]byte, error) {
	ua, ok := m.Addr.(*net.UDPAddr)
	if !ok || (len(ua.IP) != 4 && len(ua.IP) != 16) || m.NN > 0xffff {
		return b, errBadMessage
	}
	b = append(b, msgDatagram, byte(len(ua.IP)))
	b = append(b, ua.IP...)
	b = binary.BigEndian.AppendUint16(b, uint16(ua.Port))
	b = binary.BigEndian.AppendUint16(b, uint16(m.NN))
	b = append(b, m.OOB[:m.NN]...)
	return append(b, m.Buffers[0][:m.N]...), nil
}

// decodeDatagram fills m (its Buffers[0] and OOB as long as the socket's
// reads would have them) from the datagram message p, its payload and
// control messages cut to those lengths.
func decodeDatagram(p []byte, m *ipv4.Message) error {
	if len(p) < 2 || p[0] != msgDatagram {
		return errBadMessage
	}
	ipLen := int(p[1])
	if ipLen != 4 && ipLen != 16 {
		return errBadMessage
	}
	p = p[2:]
	if len(p) < ipLen+4 {
		return errBadMessage
	}
	var addr netip.Addr
	if ipLen == 4 {
		addr = netip.AddrFrom4([4]byte(p[:4]))
	} else {
		addr = netip.AddrFrom16([16]byte(p[:16]))
	}
	port := binary.BigEndian.Uint16(p[ipLen:])
	oobLen := int(binary.BigEndian.Uint16(p[ipLen+2:]))
	p = p[ipLen+4:]
	if len(p) < oobLen {
		return errBadMessage
	}
	// The address as the socket gives it: 4 bytes for IPv4, 16 else (an
	// IPv4-mapped one on a dual-stack socket stays mapped).
	ua := &net.UDPAddr{IP: addr.AsSlice(), Port: int(port)}
	m.Addr = ua
	m.NN = copy(m.OOB, p[:oobLen])
	m.N = copy(m.Buffers[0], p[oobLen:])
	m.Flags = 0
	return nil
}

// appendHello appends the hello message naming tags.
func appendHello(b []byte, tags []byte) []byte {
	return append(append(b, msgHello), tags...)
}

// parseHello returns the tags a hello message names.
func parseHello(p []byte) ([]byte, error) {
	if len(p) < 2 || p[0] != msgHello {
		return nil, errBadMessage
	}
	return p[1:], nil
}
