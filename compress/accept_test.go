package compress

import (
	"bytes"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
)

func TestNegotiate(t *testing.T) {
	all := []Algorithm{Zstd, Brotli, Gzip}
	tests := []struct {
		accept  string
		offered []Algorithm
		want    Algorithm
	}{
		{"gzip", all, Gzip},
		{"gzip, deflate, br", all, Brotli},                // equal q: the server's order
		{"gzip, deflate, br, zstd", all, Zstd},            // Chrome's
		{"zstd, br, gzip", []Algorithm{Gzip, Zstd}, Gzip}, // the server's order, not the client's
		{"br;q=1.0, gzip;q=0.8, *;q=0.1", all, Brotli},
		{"gzip;q=0.5, zstd;q=0.4", all, Gzip},    // q-values beat the server's order
		{"gzip;q=0, br", all, Brotli},            // q=0 excludes
		{"gzip;q=0", all, None},                  //
		{"gzip;q=0.000", all, None},              //
		{"*", all, Zstd},                         // anything: the server's first
		{"*;q=0.5, zstd;q=0", all, Brotli},       // * for the codings not named
		{"*;q=0", all, None},                     //
		{"identity", all, None},                  // only identity
		{"", all, None},                          // empty: identity only
		{"gzip;q=0.5, identity", all, None},      // identity preferred
		{"gzip, identity;q=0.5", all, Gzip},      //
		{"GZIP", all, Gzip},                      // case-insensitive
		{"x-gzip", all, Gzip},                    // RFC 9110 §8.4.1.3
		{"deflate, compress", all, None},         // none offered
		{"gzip;q=2", all, None},                  // bad q: the element is ignored
		{"gzip;q=1.5", all, None},                //
		{"gzip;q=0.1234", all, None},             //
		{"gzip;q=", all, None},                   //
		{"gzip;level=9", all, None},              // not a weight
		{"gzip;q=1.000", all, Gzip},              //
		{"gzip ; q=0.3 , br ; Q=0.2", all, Gzip}, // whitespace; Q
		{"gzip;q=0.5, gzip;q=0", all, None},      // named twice: the lower
		{" , ,gzip,", all, Gzip},                 // empty elements
		{"br", []Algorithm{Gzip}, None},
	}
	for _, tt := range tests {
		if got := NegotiateValue([]byte(tt.accept), tt.offered); got != tt.want {
			t.Errorf("Accept-Encoding %q, offered %v: %v, want %v", tt.accept, tt.offered, got, tt.want)
		}
	}
}

// TestNegotiateFields checks that every Accept-Encoding field line counts
// (RFC 9110 §5.3), and that without one nothing is compressed.
func TestNegotiateFields(t *testing.T) {
	all := []Algorithm{Zstd, Brotli, Gzip}
	var h h1.Header
	if got := Negotiate(&h, all); got != None {
		t.Errorf("no Accept-Encoding: %v, want None", got)
	}
	h.Add("Accept-Encoding", "gzip;q=0.5")
	h.Add("accept-encoding", "zstd;q=0.8")
	if got := Negotiate(&h, all); got != Zstd {
		t.Errorf("two field lines: %v, want zstd", got)
	}
}

// FuzzAcceptEncoding checks that any field value is parsed without a
// panic, and that a chosen algorithm is one the value names, by name or
// by "*".
func FuzzAcceptEncoding(f *testing.F) {
	for _, s := range []string{"gzip, deflate, br, zstd", "br;q=1.0, gzip;q=0.8, *;q=0.1", "*;q=0",
		"identity;q=0", "x-gzip", "gzip;q=0.", "gzip;q=1.0000", ";;q=1", "zstd;q=0.001"} {
		f.Add([]byte(s))
	}
	all := []Algorithm{Zstd, Brotli, Gzip}
	f.Fuzz(func(t *testing.T, v []byte) {
		got := NegotiateValue(v, all)
		if got == None {
			return
		}
		lower := bytes.ToLower(v)
		if !bytes.Contains(lower, []byte(got.String())) && !bytes.Contains(lower, []byte("*")) {
			t.Fatalf("%q: chose %v, which it does not name", v, got)
		}
		// The choice is the client's: a value that excludes it by name
		// makes it never chosen.
		if again := NegotiateValue(append(append(v[:len(v):len(v)], ','), got.String()+";q=0"...), all); again == got {
			t.Fatalf("%q: %v chosen again after %v;q=0", v, got, got)
		}
	})
}

func TestParseWeight(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"q=1", 1000, true}, {"q=0", 0, true}, {"q=0.5", 500, true}, {"q=0.25", 250, true},
		{"q=0.125", 125, true}, {" q=0.8 ", 800, true}, {"Q=1.", 1000, true},
		{"q=1.001", 0, false}, {"q=0.1234", 0, false}, {"q=-1", 0, false}, {"q=.5", 0, false},
		{"q=", 0, false}, {"q", 0, false}, {"x=1", 0, false}, {"q=0.5x", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseWeight([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseWeight(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
