package quicshare

import (
	"encoding/binary"
	"errors"
	"net"
	"time"

	"golang.org/x/net/ipv4"
)

// The mark is the datagram ReadBatch hands quic-go first after Forward:
// an Initial packet from markAddr that begins no connection. quic-go's
// read loop asks for a batch only once it has passed every datagram of
// the last one on, and its server takes up the datagrams it is passed in
// order; so when the server's VerifySourceAddress is asked about the
// mark's address (Mark), every datagram this process read before the
// hand-over has been taken up: a connection attempt among them has begun
// its handshake, or never will here. Until then the server must not
// close: an attempt it takes up while it closes is refused
// (CONNECTION_REFUSED), where one it never took up is sent again by the
// client, and passed on to the new process.

// markAddr is the mark's source address: no datagram comes from port 0,
// and a datagram to it (the Retry the mark is answered with) fails to be
// sent (EINVAL). Mark knows it by identity.
var markAddr = &net.UDPAddr{IP: net.IPv4zero, Port: 0}

// markLen is the mark's size: the least a server takes as an Initial
// packet (RFC 9000 §14.1).
const markLen = 1200

// appendMark appends the mark with the destination connection ID dcid:
// a QUIC version 1 Initial packet with no source ID and no token, its
// packet number and payload zeros.
func appendMark(b []byte, dcid []byte) []byte {
	b = append(b, 0xc0, 0, 0, 0, 1, byte(len(dcid)))
	b = append(b, dcid...)
	b = append(b, 0, 0) // the source ID's length, the token's length
	rest := markLen - len(b) - 2
	b = binary.BigEndian.AppendUint16(b, 0x4000|uint16(rest)) // a two-byte varint
	return append(b, make([]byte, rest)...)
}

// putMark puts the mark in m, a message quic-go reads into.
func (c *Conn) putMark(m *ipv4.Message) {
	m.N = copy(m.Buffers[0], c.mark)
	m.NN = 0
	m.Addr, m.Flags = markAddr, 0
}

// Mark reports whether addr is the mark's: for quic-go's
// Transport.VerifySourceAddress, which is then to return true (the mark
// gets a Retry that goes nowhere, and begins nothing). The first time, it
// closes Handled.
func (c *Conn) Mark(addr net.Addr) bool {
	if a, ok := addr.(*net.UDPAddr); !ok || a != markAddr {
		return false
	}
	c.handledOnce.Do(func() { close(c.handled) })
	return true
}

// Handled returns a channel closed once quic-go's server has taken up
// every datagram this process read before Forward (see Mark). quic-go
// drops the mark when its server's queue is full or the server has
// closed: wait for it with a bound.
func (c *Conn) Handled() <-chan struct{} { return c.handled }

// Forwarding reports whether the process passes datagrams on to a new
// process (Forward), and so marks the hand-over (Handled).
func (c *Conn) Forwarding() bool { return c.to.Load() != nil }

// arm makes the next ReadBatch begin with the mark, and wakes a ReadBatch
// waiting for a datagram (a deadline in the past; wakeUp puts back the
// one asked for).
func (c *Conn) arm() {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.marking.Store(true)
	past := time.Unix(1, 0)
	if c.from != nil {
		c.from.SetReadDeadline(past)
	}
	c.UDPConn.SetReadDeadline(past)
}

// takeMark reports whether ReadBatch is to return the mark now, and puts
// back the read deadline asked for.
func (c *Conn) takeMark() bool {
	if !c.marking.Load() {
		return false
	}
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if !c.marking.Load() {
		return false
	}
	c.marking.Store(false)
	if c.from != nil {
		c.from.SetReadDeadline(c.deadline)
	}
	c.UDPConn.SetReadDeadline(c.deadline)
	return true
}

// woken reports whether err is a read's deadline that arm set.
func (c *Conn) woken(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && c.marking.Load()
}
