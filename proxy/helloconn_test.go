package proxy

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"testing"
)

func TestHelloFragment(t *testing.T) {
	for _, tc := range []struct {
		name             string
		sent, left, room int
		want             int
	}{
		{"a small record whole", 0, 300, 571, 300},
		{"a record that just fits", 0, 571, 571, 571},
		{"halved until it fits", 0, 1500, 571, 375},
		{"halved, rounded up", 0, 1501, 571, 376},
		{"halved three times", 0, 2400, 571, 300},
		{"the second as large as the first", 375, 1125, 571, 375},
		{"then as large as the room", 750, 750, 571, 571},
		{"the last, what is left", 1321, 179, 571, 179},
		{"never past what was sent", 100, 1000, 571, 100},
		{"a small room taken as the least fragment", 0, 1500, 10, 188},
		{"the least fragment later too", 1000, 600, 0, minHelloFragment},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := helloFragment(tc.sent, tc.left, tc.room); got != tc.want {
				t.Errorf("helloFragment(%d, %d, %d) = %d, want %d", tc.sent, tc.left, tc.room, got, tc.want)
			}
		})
	}
}

// readsConn records the reads crypto/tls makes of a helloConn: each
// buffer's length and what it got.
type readsConn struct {
	*helloConn
	reads []tlsRead
}

type tlsRead struct {
	room int
	got  []byte
}

func (r *readsConn) Read(p []byte) (int, error) {
	n, err := r.helloConn.Read(p)
	r.reads = append(r.reads, tlsRead{len(p), bytes.Clone(p[:n])})
	return n, err
}

// TestHelloConnHandshake has crypto/tls read a ClientHello that came whole
// through a helloConn, with a post-quantum key share and with X25519
// alone: the handshake completes, the large ClientHello reaches it in
// records that each come whole in one read, with the same type and version
// as the client's, their payloads the client's in order, each at most as
// long as those before it together; the small one in its one record, as it
// came.
func TestHelloConnHandshake(t *testing.T) {
	site := newSite(t)
	for _, tc := range []struct {
		curves []tls.CurveID
		split  bool
	}{
		{nil, true}, // Go's default: X25519MLKEM768 first
		{[]tls.CurveID{tls.X25519}, false},
	} {
		client := site.client()
		client.CurvePreferences = tc.curves
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			c, err := tls.Dial("tcp", ln.Addr().String(), client)
			if err == nil {
				_, err = c.Write([]byte("after"))
				c.Close()
			}
			errc <- err
		}()
		nc, err := ln.Accept()
		ln.Close()
		if err != nil {
			t.Fatal(err)
		}
		// The ClientHello's record is read whole before the handshake
		// begins, as conn.awaitHello reads it.
		first := make([]byte, 16<<10)
		n := 0
		for helloPayload(first[:n]) == 0 {
			k, err := nc.Read(first[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
		hello := first[:n]
		if tc.split != (len(hello) > 576) {
			t.Fatalf("ClientHello record of %d bytes: the test's cases are one above 576 bytes and one below", len(hello))
		}
		rc := &readsConn{helloConn: newHelloConn(nc, bytes.Clone(hello), nil)}
		srv := tls.Server(rc, site.server())
		if err := srv.Handshake(); err != nil {
			t.Fatalf("handshake through helloConn: %v", err)
		}
		got := make([]byte, 5)
		if _, err := io.ReadFull(srv, got); err != nil || string(got) != "after" {
			t.Fatalf("after the handshake read %q, %v", got, err)
		}
		srv.Close()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}

		var payload []byte
		var sizes []int
		for i, r := range rc.reads {
			if len(payload) == len(hello)-tlsRecordHeader {
				break
			}
			rec := r.got
			if len(rec) < tlsRecordHeader || !bytes.Equal(rec[:3], hello[:3]) || len(rec) != tlsRecordHeader+int(binary.BigEndian.Uint16(rec[3:5])) {
				t.Fatalf("read %d (into %d bytes) got %d bytes, not one whole record of the ClientHello's type and version: % x", i, r.room, len(rec), rec[:min(len(rec), 8)])
			}
			if k := len(rec) - tlsRecordHeader; len(payload) > 0 && k > len(payload) {
				t.Errorf("read %d: %d bytes of payload after %d", i, k, len(payload))
			}
			payload = append(payload, rec[tlsRecordHeader:]...)
			sizes = append(sizes, len(rec)-tlsRecordHeader)
		}
		if !bytes.Equal(payload, hello[tlsRecordHeader:]) {
			t.Fatalf("the records' payloads are not the ClientHello's")
		}
		t.Logf("ClientHello record of %d bytes handed over in records carrying %v bytes", len(hello), sizes)
		if tc.split != (len(sizes) > 1) {
			t.Errorf("a ClientHello record of %d bytes handed over in %d records", len(hello), len(sizes))
		}
	}
}

// FuzzHelloConn reads a connection's first bytes through a helloConn with
// reads of random sizes: what comes out is the first record, when it is a
// whole handshake record, in records of its type and version whose
// payloads together are its payload; then the rest of the bytes read before, then the socket's, as
// they came.
func FuzzHelloConn(f *testing.F) {
	f.Add([]byte("\x16\x03\x01\x00\x05hello"), uint64(1))
	f.Add(append([]byte("\x16\x03\x01\x05\xdc"), bytes.Repeat([]byte{1}, 1500)...), uint64(2))
	f.Add(append([]byte("\x16\x03\x01\x05\xdc"), bytes.Repeat([]byte{1}, 1600)...), uint64(3))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), uint64(4))
	f.Add([]byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), uint64(5))
	f.Add([]byte("\x16\x03\x01\x00\x00rest"), uint64(6))
	f.Fuzz(func(t *testing.T, early []byte, seed uint64) {
		const socket = "from the socket"
		a, b := net.Pipe()
		go func() {
			b.Write([]byte(socket))
			b.Close()
		}()
		defer a.Close()
		h := newHelloConn(a, bytes.Clone(early), nil)
		rnd := rand.New(rand.NewPCG(seed, seed))
		var out []byte
		for {
			p := make([]byte, 1+rnd.IntN(2048))
			n, err := h.Read(p)
			out = append(out, p[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := helloPayload(early); n > 0 {
			// Parse the records out.
			rest := out
			var payload []byte
			for len(payload) < n {
				if len(rest) < tlsRecordHeader || !bytes.Equal(rest[:3], early[:3]) {
					t.Fatalf("not a record of the first's type and version: % x", rest[:min(len(rest), 5)])
				}
				k := int(binary.BigEndian.Uint16(rest[3:5]))
				if k == 0 || len(rest) < tlsRecordHeader+k {
					t.Fatalf("a record of %d bytes with %d left", k, len(rest)-tlsRecordHeader)
				}
				payload = append(payload, rest[tlsRecordHeader:tlsRecordHeader+k]...)
				rest = rest[tlsRecordHeader+k:]
			}
			if !bytes.Equal(payload, early[tlsRecordHeader:tlsRecordHeader+n]) {
				t.Fatal("the records' payloads are not the first record's")
			}
			out = rest
			early = early[tlsRecordHeader+n:]
		}
		if want := string(early) + socket; string(out) != want {
			t.Fatalf("after the first record got %q, want %q", out, want)
		}
	})
}
