package ratelimit

import (
	"testing"
	"time"
)

// FuzzParseRate checks that ParseRate never panics, and that a rate it
// accepts is in range and reads back from its String.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100/s", "6000/m", "10/h", "0/s", "1000001/s", "3600000000/h", "1/", "/s", "", "1//s", "١٠/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		if r.Count < 1 || r.Count > MaxCount*int64(r.Period/time.Second) || r.Interval() < time.Microsecond {
			t.Fatalf("ParseRate(%q) = %+v, out of range", s, r)
		}
		if back, err := ParseRate(r.String()); err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %+v, whose String %q reads back as %+v, %v", s, r, r.String(), back, err)
		}
	})
}
