package quicshare

import (
	"context"
	"crypto/tls"
	"errors"
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

// heldServer is an old process's QUIC server in the mark's tests, whose
// server holds the first connection attempt it takes up (its
// VerifySourceAddress waits for release, as a loaded machine may keep
// quic-go's server goroutine from an attempt queued for it), and counts
// the handshakes begun.
type heldServer struct {
	old           *Conn
	addr          string
	ln            *quic.Listener
	held, release chan struct{}
	begun         atomic.Int32
	clientTLS     *tls.Config
	dialed        chan error
}

func startHeld(t *testing.T) *heldServer {
	t.Helper()
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
	s := &heldServer{old: old, addr: udp.LocalAddr().String(), held: make(chan struct{}), release: make(chan struct{}),
		clientTLS: &tls.Config{RootCAs: ca.Pool(), ServerName: "example.com", NextProtos: []string{"echo"}},
		dialed:    make(chan error, 1)}
	var holding atomic.Bool
	tr := &quic.Transport{Conn: old, ConnectionIDGenerator: old.IDs(),
		VerifySourceAddress: func(a net.Addr) bool {
			if old.Mark(a) {
				return true
			}
			if holding.CompareAndSwap(false, true) {
				close(s.held)
				<-s.release
			}
			return false
		},
		ConnContext: func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
			s.begun.Add(1)
			return ctx, nil
		}}
	t.Cleanup(func() { old.Close() })
	t.Cleanup(func() { tr.Close() })
	s.ln, err = tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"echo"}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dial connects a client in the background (its outcome to dialed), and
// returns once the server holds its attempt.
func (s *heldServer) dial(t *testing.T) {
	t.Helper()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		qc, err := quic.DialAddr(ctx, s.addr, s.clientTLS, &quic.Config{})
		if err == nil {
			qc.CloseWithError(0, "")
		}
		s.dialed <- err
	}()
	select {
	case <-s.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's Initial never reached the server")
	}
}

// TestCloseRefusesAttemptQueued is the window the mark closes: an attempt
// the old process read before the hand-over, still queued for quic-go's
// server when its listener closes, begins its handshake as the server
// stops, and is refused (CONNECTION_REFUSED), though no handshake was
// under way when the old process decided to stop listening.
func TestCloseRefusesAttemptQueued(t *testing.T) {
	s := startHeld(t)
	s.dial(t)
	forwardTo(t, s.old)
	if n := s.begun.Load(); n != 0 {
		t.Fatalf("%d handshakes under way, want none yet", n)
	}
	closed := make(chan struct{})
	go func() { s.ln.Close(); close(closed) }()
	// Close waits for the server's goroutine, which holds the attempt.
	wait.Within(t, 10*time.Second, "the listener closing", func() bool { return wait.Blocked("quic-go.(*baseServer).close(", "chan receive") })
	close(s.release)
	<-closed
	err := <-s.dialed
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused || !te.Remote {
		t.Fatalf("the attempt read before the hand-over: %v, want CONNECTION_REFUSED from the server", err)
	}
}

// TestMarkFollowsEarlierAttempts: the mark Forward arms reaches quic-go's
// server behind every datagram read before the hand-over. Here a client's
// Initial was read before it, and the server is still taking it up when
// Forward is called: Handled stays open until that attempt has begun its
// handshake (ConnContext), so that the old process, which stops listening
// once no handshake is under way, counts it instead of refusing it as it
// stops (TestCloseRefusesAttemptQueued).
func TestMarkFollowsEarlierAttempts(t *testing.T) {
	s := startHeld(t)
	s.dial(t)
	forwardTo(t, s.old)
	select {
	case <-s.old.Handled():
		t.Fatal("Handled before the server took up the attempt read before Forward")
	default:
	}
	close(s.release)
	select {
	case <-s.old.Handled():
	case <-time.After(10 * time.Second):
		t.Fatal("the mark never reached the server")
	}
	if n := s.begun.Load(); n != 1 {
		t.Errorf("at Handled, %d handshakes had begun, want the one read before Forward", n)
	}
	if err := <-s.dialed; err != nil {
		t.Errorf("the connection attempt read before Forward: %v", err)
	}
	if n := s.begun.Load(); n != 1 {
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
