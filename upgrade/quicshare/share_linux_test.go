package quicshare

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/ipv4"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// echoServer is a process's QUIC server in the test: quic-go on its side
// of the shared socket, echoing each stream, sending each connection it
// accepts to accepted.
type echoServer struct {
	tr       *quic.Transport
	ln       *quic.Listener
	accepted chan *quic.Conn
}

func startEcho(t *testing.T, c *Conn, cert tls.Certificate) *echoServer {
	t.Helper()
	s := &echoServer{tr: &quic.Transport{Conn: c, ConnectionIDGenerator: c.IDs()}, accepted: make(chan *quic.Conn, 10)}
	ln, err := s.tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"echo"}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	go func() {
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			s.accepted <- qc
			go func() {
				for {
					st, err := qc.AcceptStream(context.Background())
					if err != nil {
						return
					}
					go func() { io.Copy(st, st); st.Close() }()
				}
			}()
		}
	}()
	t.Cleanup(func() { s.tr.Close() })
	return s
}

// echo sends a message on a new stream of qc and checks that it comes back.
func echo(t *testing.T, qc *quic.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.SetDeadline(time.Now().Add(10 * time.Second))
	st.Write([]byte(msg))
	st.Close()
	got, err := io.ReadAll(st)
	if err != nil || string(got) != msg {
		t.Fatalf("echo of %q: %q, %v", msg, got, err)
	}
}

// which returns the server that accepted the connection dialed last.
// It selects on the servers' accepted channels, so that no goroutine
// outlives it.
func which(t *testing.T, servers ...*echoServer) int {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timeout.C)}}
	for _, s := range servers {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.accepted)})
	}
	i, _, _ := reflect.Select(cases)
	if i == 0 {
		t.Fatal("no server accepted the connection")
	}
	return i - 1
}

// TestShare: two processes' sides of one UDP socket (here one process,
// each side its own copy of the descriptor, as an upgrade hands over).
// Before the hand-over the old side alone reads the socket and serves;
// once it forwards, new connections go to the new side, and the old
// side's connection goes on, neither losing a packet; once the old side
// has closed, the new one reads the socket itself and serves on.
func TestShare(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	cert := *ca.Server(t, "example.com", "127.0.0.1").TLS
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := udp.File()
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	addr := udp.LocalAddr().String()
	clientTLS := &tls.Config{RootCAs: ca.Pool(), ServerName: "example.com", NextProtos: []string{"echo"}}
	dial := func() *quic.Conn {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		qc, err := quic.DialAddr(ctx, addr, clientTLS, &quic.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qc.CloseWithError(0, "") })
		return qc
	}

	old, err := New(udp, nil)
	if err != nil {
		t.Fatal(err)
	}
	oldSrv := startEcho(t, old, cert)
	c1 := dial()
	if which(t, oldSrv) != 0 {
		t.Fatal("unreachable")
	}
	echo(t, c1, "before")

	keep, give, err := old.Successor()
	if err != nil {
		t.Fatal(err)
	}
	from, err := FromFile(give)
	if err != nil {
		t.Fatal(err)
	}
	next, err := New(pc.(*net.UDPConn), from)
	if err != nil {
		t.Fatal(err)
	}
	if next.Tag() == old.Tag() || !next.Relaying() {
		t.Fatalf("the new side's tag %d (the old one's %d), relaying %v", next.Tag(), old.Tag(), next.Relaying())
	}
	nextSrv := startEcho(t, next, cert)
	old.Forward(keep)
	oldSrv.ln.Close() // the old process takes no new connection

	c2 := dial()
	if got := which(t, oldSrv, nextSrv); got != 1 {
		t.Fatal("a new connection went to the old side")
	}
	for i := range 50 {
		echo(t, c1, "old "+string(rune('a'+i%26)))
		echo(t, c2, "new "+string(rune('a'+i%26)))
	}
	// A datagram forwarded last (an acknowledgement after the last echo)
	// may still be in the relay: every one must come through.
	forwarded, _ := old.Counts()
	if forwarded == 0 {
		t.Error("no datagram forwarded")
	}
	wait.For(t, "the forwarded datagrams over the relay", func() bool {
		forwarded, _ = old.Counts()
		_, relayed := next.Counts()
		return relayed == forwarded
	})

	// The old process drains and exits.
	c1.CloseWithError(0, "")
	oldSrv.tr.Close()
	old.Close()
	echo(t, c2, "after")
	if next.Relaying() {
		t.Error("the new side still reads the relay after the old one closed")
	}
	c3 := dial()
	if which(t, nextSrv) != 0 {
		t.Fatal("unreachable")
	}
	echo(t, c3, "alone")
	for name, qc := range map[string]*quic.Conn{"the old side's connection": c1, "the new side's first": c2} {
		if s := qc.ConnectionStats(); s.PacketsLost != 0 {
			t.Errorf("%s lost %d of %d packets", name, s.PacketsLost, s.PacketsSent)
		}
	}
	t.Logf("forwarded %d datagrams", forwarded)
}

// TestForwardWriteFailureEndsRelay: a write to the relay that fails (the
// deadline that wakes quic-go's read loop as its Transport closes ends
// the relay's writes too) closes this side's end of the relay, so that the
// new process reads the relay to its end and then the socket. Left open,
// with Close finding no relay to close, the new process read a relay that
// never ended, and took nothing from the socket (a stall TestShare met
// once in 40 runs under load).
func TestForwardWriteFailureEndsRelay(t *testing.T) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	old, err := New(udp, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	keep, give, err := old.Successor()
	if err != nil {
		t.Fatal(err)
	}
	from, err := FromFile(give)
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	keep.SetWriteBuffer(4096) // a few datagrams fill it
	old.Forward(keep)

	client, err := net.DialUDP("udp", nil, udp.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	datagram := make([]byte, 1200)
	datagram[0] = 0x40 // a short header, to a connection ID this side never handed out
	for range 32 {
		client.Write(datagram)
	}
	read := make(chan error, 1)
	go func() {
		ms := []ipv4.Message{{Buffers: [][]byte{make([]byte, 1500)}, OOB: make([]byte, 128)}}
		for {
			if _, err := old.ReadBatch(ms, 0); err != nil {
				read <- err
				return
			}
		}
	}()
	wait.For(t, "a write to the full relay", func() bool { return wait.Blocked("quicshare.(*Conn).send(", "IO wait") })
	old.SetReadDeadline(time.Now()) // as quic-go's Transport.Close does
	wait.For(t, "the relay's end", func() bool {
		from.SetReadDeadline(time.Now().Add(wait.Timeout))
		_, err := from.Read(make([]byte, maxRelayMessage))
		return errors.Is(err, io.EOF)
	})
	old.Close()
	<-read
}
