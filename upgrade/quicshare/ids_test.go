package quicshare

import (
	"bytes"
	"crypto/rand"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/ipv4"
)

// A process's IDs are recognized in short and long header packets, and
// nothing else is: another process's IDs, an ID of another length, a
// packet too short to hold one, a client's random Initial IDs.
func TestOwn(t *testing.T) {
	a, b := newIDs(7), newIDs(8)
	id, err := a.GenerateConnectionID()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := b.GenerateConnectionID()
	sameTag := newIDs(7) // another secret: a process with the tag of one gone
	foreign, _ := sameTag.GenerateConnectionID()
	if id.Len() != IDLen || a.ConnectionIDLen() != IDLen || id.Bytes()[0] != 7 {
		t.Fatalf("ID %x, want %d bytes beginning with the tag", id.Bytes(), IDLen)
	}
	short := func(id []byte) []byte { return append(append([]byte{0x40}, id...), make([]byte, 20)...) }
	long := func(typ byte, id []byte) []byte {
		p := []byte{0xc0 | typ<<4, 0, 0, 0, 1, byte(len(id))}
		return append(append(append(p, id...), 8, 1, 2, 3, 4, 5, 6, 7, 8), make([]byte, 20)...)
	}
	tests := []struct {
		name string
		p    []byte
		want bool
	}{
		{"1-RTT", short(id.Bytes()), true},
		{"Initial to its ID", long(0, id.Bytes()), true},
		{"Handshake", long(2, id.Bytes()), true},
		{"0-RTT", long(1, id.Bytes()), true},
		{"another tag", short(other.Bytes()), false},
		{"the tag, another secret", short(foreign.Bytes()), false},
		{"a longer ID", long(0, append(id.Bytes(), 0)), false},
		{"a shorter ID", long(0, id.Bytes()[:8]), false},
		{"1-RTT cut inside the ID", short(id.Bytes())[:IDLen], false},
		{"long header cut inside the ID", long(2, id.Bytes())[:10], false},
		{"empty", nil, false},
		{"a changed check", short(append(id.Bytes()[:IDLen-1:IDLen-1], id.Bytes()[IDLen-1]^1)), false},
	}
	for _, tt := range tests {
		if got := a.own(tt.p); got != tt.want {
			t.Errorf("%s: own %v, want %v", tt.name, got, tt.want)
		}
	}
	// A client's first Initial names an ID it chose: with the tag by
	// chance, it still fails the check.
	for range 10000 {
		r := make([]byte, IDLen)
		rand.Read(r)
		r[0] = a.tag
		if a.own(long(0, r)) {
			t.Fatalf("a random ID %x with the tag passed the check", r)
		}
	}
	seen := map[string]bool{}
	for range 1000 {
		id, _ := a.GenerateConnectionID()
		if seen[string(id.Bytes())] || !a.own(short(id.Bytes())) {
			t.Fatalf("ID %x repeated or not recognized", id.Bytes())
		}
		seen[string(id.Bytes())] = true
	}
}

// A datagram passes the relay whole: its sender's address as the socket
// gave it (4 or 16 bytes, an IPv4-mapped one kept), its control messages
// and its bytes; the receiving buffers cut what does not fit.
func TestRelayDatagram(t *testing.T) {
	for _, tt := range []struct {
		name string
		addr *net.UDPAddr
		oob  []byte
		data []byte
	}{
		{"IPv4", &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1).To4(), Port: 443}, []byte{1, 2, 3}, []byte("hello")},
		{"IPv6", &net.UDPAddr{IP: net.ParseIP("2001:db8::1"), Port: 65535}, nil, bytes.Repeat([]byte{0x40}, 1452)},
		{"IPv4-mapped", &net.UDPAddr{IP: netip.MustParseAddr("::ffff:10.0.0.1").AsSlice(), Port: 1}, make([]byte, 40), []byte{0}},
	} {
		m := ipv4.Message{Buffers: [][]byte{make([]byte, 1452)}, OOB: make([]byte, 128), Addr: tt.addr}
		m.N = copy(m.Buffers[0], tt.data)
		m.NN = copy(m.OOB, tt.oob)
		b, err := appendDatagram(nil, &m)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got := ipv4.Message{Buffers: [][]byte{make([]byte, 1452)}, OOB: make([]byte, 128)}
		if err := decodeDatagram(b, &got); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		ga := got.Addr.(*net.UDPAddr)
		if !bytes.Equal(ga.IP, tt.addr.IP) || ga.Port != tt.addr.Port || !bytes.Equal(got.Buffers[0][:got.N], tt.data) ||
			!bytes.Equal(got.OOB[:got.NN], tt.oob) {
			t.Errorf("%s: got %v %x %x, want %v %x %x", tt.name, ga, got.Buffers[0][:got.N], got.OOB[:got.NN], tt.addr, tt.data, tt.oob)
		}
		small := ipv4.Message{Buffers: [][]byte{make([]byte, 2)}, OOB: make([]byte, 1)}
		if err := decodeDatagram(b, &small); err != nil || small.N != min(2, len(tt.data)) || small.NN != min(1, len(tt.oob)) {
			t.Errorf("%s into small buffers: %v, %d and %d bytes", tt.name, err, small.N, small.NN)
		}
	}
	for _, bad := range [][]byte{nil, {'D'}, {'D', 5}, {'D', 4, 1, 2, 3, 4, 0}, {'D', 4, 1, 2, 3, 4, 0, 1, 0, 9, 1}, {'H', 1}} {
		m := ipv4.Message{Buffers: [][]byte{make([]byte, 10)}, OOB: make([]byte, 10)}
		if err := decodeDatagram(bad, &m); err == nil {
			t.Errorf("decodeDatagram(%x) accepted", bad)
		}
	}
	if tags, err := parseHello(appendHello(nil, []byte{3, 9})); err != nil || !bytes.Equal(tags, []byte{3, 9}) {
		t.Errorf("hello: %v %v", tags, err)
	}
	if _, err := parseHello([]byte{'H'}); err == nil {
		t.Error("a hello naming no tag accepted")
	}
}

func FuzzDecodeDatagram(f *testing.F) {
	m := ipv4.Message{Buffers: [][]byte{[]byte("datagram")}, OOB: []byte{1, 2}, Addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 8443}, N: 8, NN: 2}
	b, _ := appendDatagram(nil, &m)
	f.Add(b)
	f.Add([]byte{'D', 16})
	f.Add(appendHello(nil, []byte{1}))
	f.Fuzz(func(t *testing.T, p []byte) {
		got := ipv4.Message{Buffers: [][]byte{make([]byte, 1452)}, OOB: make([]byte, 128)}
		if err := decodeDatagram(p, &got); err != nil {
			return
		}
		// What decodes encodes to a message that decodes the same.
		again, err := appendDatagram(nil, &got)
		if err != nil {
			t.Fatalf("a decoded datagram does not encode: %v", err)
		}
		twice := ipv4.Message{Buffers: [][]byte{make([]byte, 1452)}, OOB: make([]byte, 128)}
		if err := decodeDatagram(again, &twice); err != nil {
			t.Fatal(err)
		}
		if twice.Addr.String() != got.Addr.String() || !bytes.Equal(twice.Buffers[0][:twice.N], got.Buffers[0][:got.N]) ||
			!bytes.Equal(twice.OOB[:twice.NN], got.OOB[:got.NN]) {
			t.Fatalf("%x decoded, encoded and decoded differs", p)
		}
	})
}

func FuzzOwn(f *testing.F) {
	x := newIDs(1)
	id, _ := x.GenerateConnectionID()
	f.Add(append([]byte{0x40}, id.Bytes()...))
	f.Add([]byte{0xc0, 0, 0, 0, 1, IDLen})
	f.Fuzz(func(t *testing.T, p []byte) {
		if x.own(p) && (len(p) < 1+IDLen) {
			t.Fatalf("own(%x) with no room for an ID", p)
		}
	})
}

func FuzzParseHello(f *testing.F) {
	f.Add(appendHello(nil, []byte{1}))
	f.Add(appendHello(nil, []byte{3, 9, 200}))
	f.Add([]byte{'H'})
	f.Add([]byte{'D', 1, 2})
	f.Fuzz(func(t *testing.T, p []byte) {
		tags, err := parseHello(p)
		if err != nil {
			return
		}
		// What parses is a hello of its tags, byte for byte.
		if len(tags) == 0 || !bytes.Equal(appendHello(nil, tags), p) {
			t.Fatalf("%x parsed as the tags %x", p, tags)
		}
	})
}
