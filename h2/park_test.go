package h2

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// parkServer serves the connections it accepts with ParkAfter set, as
// sluice's proxy does: each Serve that returns ErrIdle is reported on
// parked, and Serve is called again, on a new goroutine, once the test
// sends on resume. Serve's other results go to ended.
type parkServer struct {
	conns  chan *Conn
	parked chan *Conn
	resume chan struct{}
	ended  chan error
}

func newParkServer(t *testing.T, s Settings) (*parkServer, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ps := &parkServer{conns: make(chan *Conn, 1), parked: make(chan *Conn, 10),
		resume: make(chan struct{}), ended: make(chan error, 1)}
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		c := NewConn(nc, nil, &s, ok)
		t.Cleanup(c.Close)
		ps.conns <- c
		var serve func()
		serve = func() {
			err := c.Serve()
			if err != ErrIdle {
				ps.ended <- err
				return
			}
			ps.parked <- c
			go func() {
				<-ps.resume
				serve()
			}()
		}
		serve()
	}()
	return ps, ln.Addr().String()
}

// waitParked waits for the connection's Serve to return ErrIdle.
func (ps *parkServer) waitParked(t *testing.T) *Conn {
	t.Helper()
	select {
	case c := <-ps.parked:
		return c
	case err := <-ps.ended:
		t.Fatalf("Serve returned %v, want ErrIdle", err)
	case <-time.After(failsafe):
		t.Fatal("the connection did not park")
	}
	return nil
}

func (ps *parkServer) wantEnded(t *testing.T) {
	t.Helper()
	select {
	case err := <-ps.ended:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-ps.parked:
		t.Fatal("Serve returned ErrIdle, want nil")
	case <-time.After(failsafe):
		t.Fatal("Serve did not return")
	}
}

// TestPark checks the life of an idle connection whose Serve returned
// ErrIdle and is called again: on the client's next request, on its close,
// at the idle timeout, on Shutdown and on Close; and that a frame begun
// keeps Serve reading, whatever ParkAfter.
func TestPark(t *testing.T) {
	const parkAfter = 20 * time.Millisecond
	settings := Settings{ParkAfter: parkAfter, IdleTimeout: time.Minute}
	t.Run("next request", func(t *testing.T) {
		ps, addr := newParkServer(t, settings)
		rc := handshake(t, addr)
		rc.headers(1, true, getReq...)
		rc.wantResponse(1)
		ps.waitParked(t)
		// Nothing reads the connection now: the request waits in the
		// socket until Serve is called again.
		rc.headers(3, true, getReq...)
		ps.resume <- struct{}{}
		if s, body := rc.wantResponse(3); s != "200" || string(body) != "ok" {
			t.Fatalf("after parking: %q %q", s, body)
		}
		ps.waitParked(t) // and it parks again
	})
	t.Run("client closes", func(t *testing.T) {
		ps, addr := newParkServer(t, settings)
		rc := handshake(t, addr)
		ps.waitParked(t)
		rc.nc.(*net.TCPConn).CloseWrite() // a FIN, unread frames or not
		ps.resume <- struct{}{}
		ps.wantEnded(t)
	})
	t.Run("idle timeout", func(t *testing.T) {
		s := settings
		s.IdleTimeout = 5 * parkAfter
		ps, addr := newParkServer(t, s)
		rc := handshake(t, addr)
		rc.headers(1, true, getReq...)
		rc.wantResponse(1)
		c := ps.waitParked(t)
		by := c.IdleDeadline()
		if by.IsZero() || time.Until(by) > s.IdleTimeout {
			t.Fatalf("IdleDeadline %v, want within %v", by, s.IdleTimeout)
		}
		time.Sleep(time.Until(by))
		ps.resume <- struct{}{}
		if ga := rc.wantGoAway(http2.ErrCodeNo); ga.LastStreamID != 1 {
			t.Fatalf("GOAWAY's last stream %d, want 1", ga.LastStreamID)
		}
		ps.wantEnded(t)
	})
	t.Run("shutdown", func(t *testing.T) {
		ps, addr := newParkServer(t, settings)
		rc := handshake(t, addr)
		rc.headers(1, true, getReq...)
		rc.wantResponse(1)
		c := ps.waitParked(t)
		c.Shutdown()
		ps.resume <- struct{}{}
		f := rc.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
		if ga := f.(*http2.GoAwayFrame); ga.LastStreamID != 1<<31-1 {
			t.Fatalf("first GOAWAY's last stream %d", ga.LastStreamID)
		}
		ping := rc.until("PING", func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
		rc.fr.WritePing(true, ping.Data)
		if ga := rc.wantGoAway(http2.ErrCodeNo); ga.LastStreamID != 1 {
			t.Fatalf("final GOAWAY's last stream %d, want 1", ga.LastStreamID)
		}
		ps.wantEnded(t)
	})
	t.Run("close", func(t *testing.T) {
		ps, addr := newParkServer(t, settings)
		rc := handshake(t, addr)
		c := ps.waitParked(t)
		c.Close()
		ps.resume <- struct{}{}
		ps.wantEnded(t)
		rc.wantClosed()
	})
	t.Run("frame begun", func(t *testing.T) {
		ps, addr := newParkServer(t, settings)
		rc := handshake(t, addr)
		ps.waitParked(t)
		var frame bytes.Buffer
		fr := http2.NewFramer(&frame, nil)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.block(getReq...), EndStream: true, EndHeaders: true})
		b := frame.Bytes()
		rc.nc.Write(b[:4])
		ps.resume <- struct{}{} // as a parker would: bytes came
		time.Sleep(5 * parkAfter)
		rc.nc.Write(b[4:])
		if s, _ := rc.wantResponse(1); s != "200" {
			t.Fatalf("status %q", s)
		}
		select {
		case <-ps.parked:
			t.Fatal("parked in the middle of a frame")
		default:
		}
	})
}
