package h2

import (
	"bytes"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// parkServer serves the connection it accepts with h and ParkAfter set, as
// sluice's proxy does: each Serve that returns ErrIdle is reported on
// parked, and Serve is called again, on a new goroutine, once the test
// sends on resume. Serve's other results go to ended. At the test's end
// the connection is closed and a parked one resumed, as the proxy's
// parker does, so that Serve returns.
type parkServer struct {
	conns  chan *Conn
	parked chan *Conn
	resume chan struct{}
	ended  chan error
}

func newParkServer(t *testing.T, s Settings, h Handler) (*parkServer, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &parkServer{conns: make(chan *Conn, 1), parked: make(chan *Conn, 10),
		resume: make(chan struct{}), ended: make(chan error, 1)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		close(stop)
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		c := NewConn(nc, nil, &s, h)
		ps.conns <- c
		var serve func()
		serve = func() {
			err := c.Serve()
			if err != ErrIdle {
				select {
				case ps.ended <- err:
				default: // the test did not wait for it
				}
				return
			}
			ps.parked <- c
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case <-ps.resume:
				case <-stop:
					c.Close()
				}
				serve()
			}()
		}
		serve()
		<-stop
		c.Close()
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

// resumeParks resumes the parked connection and reports whether it
// parked again; false when Serve returned nil.
func (ps *parkServer) resumeParks(t *testing.T) bool {
	t.Helper()
	ps.resume <- struct{}{}
	select {
	case <-ps.parked:
		return true
	case err := <-ps.ended:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
		return false
	case <-time.After(failsafe):
		t.Fatal("Serve neither parked nor returned")
	}
	return false
}

// TestPark checks the life of an idle connection whose Serve returned
// ErrIdle and is called again: on the client's next request, on its close,
// at the idle timeout, on Shutdown and on Close; and that a frame begun
// keeps Serve reading, whatever ParkAfter.
func TestPark(t *testing.T) {
	const parkAfter = 20 * time.Millisecond
	settings := Settings{ParkAfter: parkAfter, IdleTimeout: time.Minute}
	t.Run("next request", func(t *testing.T) {
		ps, addr := newParkServer(t, settings, ok)
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
	t.Run("header table", func(t *testing.T) {
		// A parked connection lets go of its HPACK encoder's table; the
		// next block must say so (size updates) for the client, whose
		// decoder keeps its table, to read it right.
		tag := func(st *Stream) {
			var path string
			for _, f := range st.Header() {
				if f.Name == ":path" {
					path = f.Value
				}
			}
			st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"},
				{Name: "x-tag", Value: path}}, nil, true)
		}
		ps, addr := newParkServer(t, settings, tag)
		rc := handshake(t, addr)
		ask := func(id uint32, path string) {
			t.Helper()
			rc.headers(id, true, ":method", "GET", ":scheme", "http", ":path", path, ":authority", "x")
			f := rc.until("response HEADERS", func(f http2.Frame) bool {
				_, ok := f.(*http2.MetaHeadersFrame)
				return ok && f.Header().StreamID == id
			}).(*http2.MetaHeadersFrame)
			var got []string
			for _, hf := range f.Fields {
				got = append(got, hf.Name+": "+hf.Value)
			}
			if want := []string{":status: 200", "x-tag: " + path}; !slices.Equal(got, want) {
				t.Fatalf("response to %s: %q, want %q", path, got, want)
			}
		}
		ask(1, "/a")
		ask(3, "/a") // from the table now
		ps.waitParked(t)
		ps.resume <- struct{}{}
		ask(5, "/b")
		ask(7, "/a")
		ps.waitParked(t)
	})
	t.Run("client closes", func(t *testing.T) {
		ps, addr := newParkServer(t, settings, ok)
		rc := handshake(t, addr)
		ps.waitParked(t)
		rc.nc.(*net.TCPConn).CloseWrite() // a FIN, unread frames or not
		ps.resume <- struct{}{}
		ps.wantEnded(t)
	})
	t.Run("idle timeout", func(t *testing.T) {
		s := settings
		s.IdleTimeout = 5 * parkAfter
		ps, addr := newParkServer(t, s, ok)
		rc := handshake(t, addr)
		rc.headers(1, true, getReq...)
		rc.wantResponse(1)
		c := ps.waitParked(t)
		by := c.IdleDeadline()
		if by.IsZero() || time.Until(by) > s.IdleTimeout {
			t.Fatalf("IdleDeadline %v, want within %v", by, s.IdleTimeout)
		}
		// As a parker that wakes at every deadline: Serve parks again
		// until the idle timeout comes before ParkAfter, then ends the
		// connection (TestParkDeadlines resumes it past the deadline).
		for ps.resumeParks(t) {
		}
		if now := time.Now(); now.Before(by) {
			t.Fatalf("ended %v before the idle deadline", by.Sub(now))
		}
		if ga := rc.wantGoAway(http2.ErrCodeNo); ga.LastStreamID != 1 {
			t.Fatalf("GOAWAY's last stream %d, want 1", ga.LastStreamID)
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		ps, addr := newParkServer(t, settings, ok)
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
		ps, addr := newParkServer(t, settings, ok)
		rc := handshake(t, addr)
		c := ps.waitParked(t)
		c.Close()
		ps.resume <- struct{}{}
		ps.wantEnded(t)
		rc.wantClosed()
	})
}

// TestParkDeadlines checks the time-driven part of parking with time
// faked (testing/synctest), over net.Pipe: a connection resumed once its
// idle deadline has passed ends with GOAWAY(NO_ERROR) at once, and a frame
// begun before the park deadline keeps Serve reading past it. No stream
// is opened: a handler would run on a worker shared with other tests,
// outside the bubble.
func TestParkDeadlines(t *testing.T) {
	const parkAfter = 20 * time.Millisecond
	// start serves the server end of a pipe as newParkServer does, and
	// returns the raw client, its handshake done and every frame the server
	// owes read.
	start := func(t *testing.T, settings Settings) (rc *rawClient, parked chan *Conn, resume chan struct{}, ended chan error) {
		cn, sn := net.Pipe()
		c := NewConn(sn, nil, &settings, ok)
		parked, resume, ended = make(chan *Conn, 1), make(chan struct{}), make(chan error, 1)
		stop := make(chan struct{})
		go func() {
			for {
				if err := c.Serve(); err != ErrIdle {
					ended <- err
					return
				}
				parked <- c
				select {
				case <-resume:
				case <-stop:
					c.Close()
				}
			}
		}()
		t.Cleanup(func() {
			close(stop)
			c.Close()
			cn.Close()
		})
		rc = newRawClient(t, cn)
		rc.start()
		if sf, ok := rc.read().(*http2.SettingsFrame); !ok || sf.IsAck() {
			t.Fatal("first frame not SETTINGS")
		}
		rc.fr.WriteSettingsAck()
		rc.until("SETTINGS ack", func(f http2.Frame) bool { sf, ok := f.(*http2.SettingsFrame); return ok && sf.IsAck() })
		return rc, parked, resume, ended
	}
	t.Run("resumed past the idle deadline", func(t *testing.T) {
		settings := Settings{ParkAfter: parkAfter, IdleTimeout: 5 * parkAfter}
		synctest.Test(t, func(t *testing.T) {
			rc, parked, resume, ended := start(t, settings)
			c := <-parked
			by := c.IdleDeadline()
			if want := time.Now().Add(settings.IdleTimeout - parkAfter); !by.Equal(want) {
				t.Fatalf("IdleDeadline %v, want %v", by, want)
			}
			time.Sleep(time.Until(by))
			resume <- struct{}{}
			if ga := rc.wantGoAway(http2.ErrCodeNo); ga.LastStreamID != 0 {
				t.Fatalf("GOAWAY's last stream %d, want 0", ga.LastStreamID)
			}
			if err := <-ended; err != nil {
				t.Fatalf("Serve: %v", err)
			}
		})
	})
	t.Run("frame begun", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rc, parked, resume, ended := start(t, Settings{ParkAfter: parkAfter, IdleTimeout: time.Minute})
			<-parked
			var frame bytes.Buffer
			http2.NewFramer(&frame, nil).WritePing(false, [8]byte{'b', 'e', 'g', 'u', 'n'})
			b := frame.Bytes()
			resume <- struct{}{} // as a parker would once bytes came
			rc.nc.Write(b[:4])
			// Past ParkAfter three times over, and between two of the
			// read deadlines it sets, so that the frame ends before the next.
			time.Sleep(3*parkAfter + parkAfter/2)
			rc.nc.Write(b[4:])
			rc.until("PING ack", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
			select {
			case <-parked:
				t.Fatal("parked in the middle of a frame")
			case err := <-ended:
				t.Fatalf("Serve returned %v", err)
			default:
			}
		})
	})
}
