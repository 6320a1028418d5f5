package idempotency

import (
	"bytes"
	"testing"
)

// FuzzParseKeyValue checks that ParseKeyValue never panics, that a key it
// takes is 1..255 bytes of printable ASCII, that a bare value is its own
// key, and that a key written as a quoted string reads back as itself.
func FuzzParseKeyValue(f *testing.F) {
	for _, s := range []string{"8e03978e-40d5-43e8-bc93-6894a57f9324", `"8e03978e"`, `"a\"b\\c"`, `""`, `"`,
		`"\`, `"x"y`, "tab\tkey", "caf\xc3\xa9", "", " ", `\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		key, err := ParseKeyValue(v)
		if err != nil {
			if _, ok := err.(*KeyError); !ok {
				t.Fatalf("ParseKeyValue(%q): %v is not a *KeyError", v, err)
			}
			return
		}
		if len(key) == 0 || len(key) > MaxKeyLen {
			t.Fatalf("ParseKeyValue(%q) = %q: %d bytes", v, key, len(key))
		}
		for _, c := range key {
			if c < 0x20 || c > 0x7e {
				t.Fatalf("ParseKeyValue(%q) = %q: byte %#x", v, key, c)
			}
		}
		if v[0] != '"' && !bytes.Equal(key, v) {
			t.Fatalf("ParseKeyValue(%q) = %q, not the bare value", v, key)
		}
		quoted := sfString(string(key))
		if back, err := ParseKeyValue([]byte(quoted)); err != nil || !bytes.Equal(back, key) {
			t.Fatalf("key %q quoted as %s reads back as %q, %v", key, quoted, back, err)
		}
	})
}

// FuzzParseScope checks that ParseScope never panics and that a scope it
// takes reads back from its String.
func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"route", "client_ip", "header:Authorization", "header:", "header:a b", "header:header:x", "cookie:x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := ParseScope(s)
		if err != nil {
			return
		}
		if sc.String() != s {
			t.Fatalf("ParseScope(%q).String() = %q", s, sc.String())
		}
		if back, err := ParseScope(sc.String()); err != nil || back != sc {
			t.Fatalf("ParseScope(%q) = %v does not read back: %v, %v", s, sc, back, err)
		}
	})
}

// FuzzParseStatuses checks that ParseStatuses never panics and takes only
// statuses and classes.
func FuzzParseStatuses(f *testing.F) {
	for _, s := range []string{"408", "5xx", "4XX", "600", "0xx", "+200", "", "20x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseStatuses([]string{s})
		if err != nil {
			return
		}
		n := 0
		for c := 100; c <= 599; c++ {
			if set.Has(c) {
				n++
			}
		}
		if len(s) != 3 || (n != 1 && n != 100) {
			t.Fatalf("ParseStatuses(%q) took it, %d statuses", s, n)
		}
	})
}

// FuzzDecodeAnswer checks that DecodeAnswer never panics on bytes a store
// may hold (a corrupt record), and that what it takes encodes back to
// the same bytes.
func FuzzDecodeAnswer(f *testing.F) {
	f.Add(sample().Encode(nil))
	f.Add((&Answer{Status: 204}).Encode(nil))
	f.Add([]byte("SI\x01"))
	f.Add([]byte("SI\x01\xc8\x01\x00\x01\x01a\x01b\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAnswer(b)
		if err != nil {
			return
		}
		if enc := a.Encode(nil); !bytes.Equal(enc, b) {
			t.Fatalf("DecodeAnswer(%q) encodes back as %q", b, enc)
		}
	})
}
