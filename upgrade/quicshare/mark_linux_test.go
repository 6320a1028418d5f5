package quicshare

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/sluice-proxy/sluice/internal/tlstest"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// forwardTo makes a relay for old (Successor) whose far end nobody reads,
// and has old forward to it.
func forwardTo(t *testing.T, old *Conn) {
	t.Helper()
	keep, give, err := old.Successor()
	if err != nil {
		t.Fatal(err)
	}
	far, err := FromFile(give)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { far.Close() })
	old.Forward(keep)
}

// TestMarkFollowsEarlierAttempts: the mark Forward arms reaches quic-go's
// server behind every datagram read before the hand-over. Here a client's
// Initial was read before it, and the server is still taking it up (its
// VerifySourceAddress held, as a loaded machine may hold it) when Forward
// is called: Handled stays open until that attempt has begun its
// handshake (ConnContext), so that the old process, which stops listening
// once no handshake is under way, counts it instead of refusing it
// (CONNECTION_REFUSED) as it stops.
func TestMarkFollowsEarlierAttempts(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	cert := *ca.Server(t, "example.com", "127.0.0.1").TLS
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	old, err := New(udp, nil)
	if err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var holding atomic.Bool
	var begun atomic.Int32
	tr := &quic.Transport{Conn: old, ConnectionIDGenerator: old.IDs(),
		VerifySourceAddress: func(a net.Addr) bool {
			if old.Mark(a) {
				return true
			}
			if holding.CompareAndSwap(false, true) {
				close(held)
				<-release
			}
			return false
		},
		ConnContext: func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
			begun.Add(1)
			return ctx, nil
		}}
	defer old.Close()
	defer tr.Close()
	ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"echo"}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	dialed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		qc, err := quic.DialAddr(ctx, udp.LocalAddr().String(),
			&tls.Config{RootCAs: ca.Pool(), ServerName: "example.com", NextProtos: []string{"echo"}}, &quic.Config{})
		if err == nil {
			qc.CloseWithError(0, "")
		}
		dialed <- err
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's Initial never reached the server")
	}
	forwardTo(t, old)
	select {
	case <-old.Handled():
		t.Fatal("Handled before the server took up the attempt read before Forward")
	default:
	}
	close(release)
	select {
	case <-old.Handled():
	case <-time.After(10 * time.Second):
		t.Fatal("the mark never reached the server")
	}
	if n := begun.Load(); n != 1 {
		t.Errorf("at Handled, %d handshakes had begun, want the one read before Forward", n)
	}
	if err := <-dialed; err != nil {
		t.Errorf("the connection attempt read before Forward: %v", err)
	}
	if n := begun.Load(); n != 1 {
		t.Errorf("%d handshakes began on the old side, want 1", n)
	}
}

// TestMarkWakesTheRead: with no datagram coming, Forward's mark still
// reaches the server (the read waiting for a datagram is woken), and the
// read goes on after it: a datagram that comes next is passed on.
func TestMarkWakesTheRead(t *testing.T) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	old, err := New(udp, nil)
	if err != nil {
		t.Fatal(err)
	}
	var marks atomic.Int32
	tr := &quic.Transport{Conn: old, ConnectionIDGenerator: old.IDs(),
		VerifySourceAddress: func(a net.Addr) bool {
			if old.Mark(a) {
				marks.Add(1)
			}
			return true
		}}
	defer old.Close()
	defer tr.Close()
	ca := tlstest.NewCA(t, "test CA")
	cert := *ca.Server(t, "example.com", "127.0.0.1").TLS
	ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"echo"}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// quic-go's read loop waits in ReadBatch once it has started.
	if !wait.Until(10*time.Second, func() bool { return wait.Blocked("quicshare.(*Conn).ReadBatch(", "IO wait") }) {
		t.Fatal("quic-go's read loop never waited for a datagram")
	}
	forwardTo(t, old)
	select {
	case <-old.Handled():
	case <-time.After(10 * time.Second):
		t.Fatal("the mark never reached the server")
	}
	client, err := net.DialUDP("udp", nil, udp.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.Write(appendMark(nil, []byte{9, 9, 9, 9, 9, 9, 9, 9})) // an Initial, from a client
	wait.Within(t, 10*time.Second, "the datagram passed on", func() bool {
		n, _ := old.Counts()
		return n == 1
	})
	if n := marks.Load(); n != 1 {
		t.Errorf("%d marks, want 1", n)
	}
}
