// Package quicshare lets the processes of a binary upgrade (package
// upgrade) share one UDP socket for QUIC without a datagram going to the
// process that does not hold its connection.
//
// The kernel gives each datagram of a socket to whichever process reads it
// first, and QUIC tells its connections apart by connection ID, not by
// address: two processes reading one socket would each drop the datagrams
// of the other's connections, which then finish, if at all, by QUIC's
// retransmissions. So one process at a time reads the socket. After an
// upgrade the old process goes on reading it while its connections drain,
// and passes each datagram that is not its own to the new process over a
// Unix socket pair, the relay (Successor, Forward): those of the new
// process's connections, and new connection attempts. The new process
// reads its relay (New), not the socket, until the old one closes it or
// exits, then the socket. Both send on the socket. Nothing is dropped on
// the way: the relay's writes wait while the new process's queue is full.
// The datagrams the old process read before the hand-over are still on
// their way through quic-go when it begins: Forward puts a mark behind
// them, and Handled says when quic-go's server has taken them all up, so
// that the old process stops listening only once the connection attempts
// among them have begun their handshakes (and completed them), none
// refused as it stops.
//
// A datagram is a process's own when its destination connection ID is one
// the process handed out (IDs, for quic-go's Transport): each process
// makes IDs of IDLen bytes that begin with its tag, a byte no other
// process alive uses (the relay's first message names theirs), and end
// with a check keyed by a secret of its own. The tag is the same in all
// the process's IDs (an observer learns which process of an upgrade holds
// a connection, and nothing that links two IDs of one connection).
//
// Sharing needs Linux (SOCK_SEQPACKET socket pairs); elsewhere Successor
// fails and each process reads the socket as quic-go does alone.
package quicshare

import (
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/ipv4"
)

// Conn is one process's side of a shared QUIC socket: what quic-go's
// Transport reads (its Conn field; it is a *net.UDPConn for all else: its
// writes, GSO, ECN and buffer sizes go to the socket), and the connection
// IDs the process hands out (IDs). ReadBatch, quic-go's read loop, is for
// one goroutine; the other methods are safe for concurrent use.
type Conn struct {
	*net.UDPConn
	sock *ipv4.PacketConn // the socket, read in batches (recvmmsg)
	ids  *ids

	// from is the old process's relay, read instead of the socket until
	// it ends (fromGone); before is the tags its hello named.
	from     *net.UnixConn
	fromGone atomic.Bool
	before   []byte
	// to is the new process's relay, once it serves (Forward).
	to atomic.Pointer[net.UnixConn]

	rbuf, wbuf []byte // ReadBatch's

	forwarded, relayed atomic.Int64

	// mark is the datagram ReadBatch returns first once Forward armed it
	// (marking), handled closed once quic-go took it up (mark.go).
	// deadline is the read deadline asked for (SetReadDeadline), which
	// arm's wake-up replaces for a moment; dmu orders the two.
	mark        []byte
	marking     atomic.Bool
	handled     chan struct{}
	handledOnce sync.Once
	dmu         sync.Mutex
	deadline    time.Time
}

// New returns the process's side of udp. from is the relay from the old
// process of an upgrade, when this process is its new one (see Successor;
// it is read until it ends, and closed), else nil. New reads the relay's
// hello, and takes a tag that no process alive uses.
func New(udp *net.UDPConn, from *net.UnixConn) (*Conn, error) {
	dcid := make([]byte, IDLen)
	binary.BigEndian.PutUint64(dcid, mrand.Uint64())
	c := &Conn{UDPConn: udp, sock: ipv4.NewPacketConn(udp), from: from,
		mark: appendMark(nil, dcid), handled: make(chan struct{})}
	if from == nil {
		c.fromGone.Store(true)
		c.ids = newIDs(byte(mrand.Uint32()))
		return c, nil
	}
	from.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 512)
	n, err := from.Read(b)
	from.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, fmt.Errorf("quicshare: reading the relay's hello: %w", err)
	}
	used, err := parseHello(b[:n])
	if err != nil || len(used) >= 256 {
		return nil, fmt.Errorf("quicshare: the relay's hello: %w", errBadMessage)
	}
	c.before = slices.Clone(used)
	tag := byte(mrand.Uint32())
	for slices.Contains(used, tag) {
		tag++
	}
	c.ids = newIDs(tag)
	return c, nil
}

// IDs returns the generator of the process's connection IDs, for quic-go's
// Transport.ConnectionIDGenerator: a datagram is the process's own when
// its destination ID is one of them.
func (c *Conn) IDs() quic.ConnectionIDGenerator { return c.ids }

// Tag returns the first byte of the process's connection IDs.
func (c *Conn) Tag() byte { return c.ids.tag }

// Successor makes the relay to the new process of an upgrade: keep is this
// process's side (for Forward, once the new process serves; to be closed
// if it fails), give the new one's, to hand over as an inherited socket
// (and close here once handed over). The relay begins with a hello naming
// the tags of this process and of those still before it.
func (c *Conn) Successor() (keep *net.UnixConn, give *os.File, err error) {
	keep, give, err = socketPair()
	if err != nil {
		return nil, nil, err
	}
	tags := []byte{c.ids.tag}
	if !c.fromGone.Load() {
		tags = append(tags, c.before...)
	}
	keep.SetWriteBuffer(relayBuffer)
	if _, err := keep.Write(appendHello(nil, tags)); err != nil {
		keep.Close()
		give.Close()
		return nil, nil, fmt.Errorf("quicshare: writing the relay's hello: %w", err)
	}
	return keep, give, nil
}

// relayBuffer is the send buffer asked for a relay (the kernel caps it at
// net.core.wmem_max): a burst of datagrams waits in it for the new process.
const relayBuffer = 4 << 20

// Forward passes, from now on, every datagram that is not this process's
// to the new process over to (keep, from Successor), which Close closes.
// The datagrams read before are quic-go's still; Handled says when it has
// taken them all up.
func (c *Conn) Forward(to *net.UnixConn) {
	if old := c.to.Swap(to); old != nil {
		old.Close()
	}
	c.arm()
}

// Relaying reports whether the process still reads the old process's
// relay instead of the socket.
func (c *Conn) Relaying() bool { return !c.fromGone.Load() }

// Counts returns the datagrams passed on to the new process, and those
// that came over the relay from the old one.
func (c *Conn) Counts() (forwarded, relayed int64) { return c.forwarded.Load(), c.relayed.Load() }

// ReadBatch reads datagrams into ms as x/net's ipv4.PacketConn does
// (quic-go reads a Conn with it): from the old process's relay, while it
// is open, else from the socket; those for the new process, once there is
// one, are passed to it and not returned. It returns at least one.
func (c *Conn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	for {
		if c.takeMark() {
			// quic-go asks for a batch once it has passed the last one
			// on: the mark follows every datagram read before Forward.
			c.putMark(&ms[0])
			return 1, nil
		}
		n, err := c.read(ms, flags)
		if err != nil && c.woken(err) {
			continue // arm's wake-up: the mark, then the read again
		}
		if err != nil || n == 0 {
			return n, err
		}
		to := c.to.Load()
		if to == nil {
			return n, nil
		}
		k := 0
		for i := range n {
			m := &ms[i]
			if to != nil && !c.ids.own(m.Buffers[0][:m.N]) {
				if err := c.send(to, m); err == nil {
					continue
				}
				// The new process is gone, or this one is closing (the
				// deadline that wakes quic-go's read loop ends the
				// relay's write too): this one takes what comes, and
				// closes its end of the relay, so that a new process
				// still there reads the socket instead of a relay that
				// would never end (Close finds no relay to close).
				if c.to.CompareAndSwap(to, nil) {
					to.Close()
				}
				to = nil
			}
			if k != i {
				move(&ms[k], m)
			}
			k++
		}
		if k > 0 {
			return k, nil
		}
	}
}

// read reads datagrams into ms from the old process's relay, one at a
// time, until it ends; then from the socket.
func (c *Conn) read(ms []ipv4.Message, flags int) (int, error) {
	for !c.fromGone.Load() {
		if c.rbuf == nil {
			c.rbuf = make([]byte, maxRelayMessage)
		}
		n, err := c.from.Read(c.rbuf)
		var ne net.Error
		switch {
		case err == nil:
			if decodeDatagram(c.rbuf[:n], &ms[0]) != nil {
				continue // nothing the old process writes; not a datagram
			}
			c.relayed.Add(1)
			return 1, nil
		case errors.As(err, &ne) && ne.Timeout():
			return 0, err // a deadline (quic-go's Transport closing)
		}
		// The relay ended (io.EOF: the old process has gone) or broke:
		// this process reads the socket.
		c.fromGone.Store(true)
		c.from.Close()
	}
	return c.sock.ReadBatch(ms, flags)
}

// send passes m to the new process.
func (c *Conn) send(to *net.UnixConn, m *ipv4.Message) error {
	b, err := appendDatagram(c.wbuf[:0], m)
	c.wbuf = b
	if err != nil {
		return nil // no address to pass on: dropped, as quic-go would
	}
	if _, err := to.Write(b); err != nil {
		return err
	}
	c.forwarded.Add(1)
	return nil
}

// move puts the datagram src in dst, an earlier message of the same batch,
// whose buffers hold nothing still needed.
func move(dst, src *ipv4.Message) {
	dst.N = copy(dst.Buffers[0], src.Buffers[0][:src.N])
	dst.NN = copy(dst.OOB, src.OOB[:src.NN])
	dst.Addr, dst.Flags = src.Addr, src.Flags
}

// SetReadDeadline sets the deadline of reads from the socket and the old
// process's relay, and of the writes to the new process's relay (made by
// the reading goroutine): a past one stops quic-go's read loop wherever it
// waits.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.deadline = t
	if c.from != nil {
		c.from.SetReadDeadline(t)
	}
	if to := c.to.Load(); to != nil {
		to.SetWriteDeadline(t)
	}
	return c.UDPConn.SetReadDeadline(t)
}

// SetDeadline sets the read deadlines (SetReadDeadline) and the socket's
// write deadline.
func (c *Conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.UDPConn.SetDeadline(t)
}

// Close closes the socket (this process's copy) and the relays: the new
// process then reads the socket itself.
func (c *Conn) Close() error {
	if to := c.to.Swap(nil); to != nil {
		to.Close()
	}
	if c.from != nil {
		c.from.Close()
	}
	return c.UDPConn.Close()
}
