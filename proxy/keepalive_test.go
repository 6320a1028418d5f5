package proxy

import (
	"testing"
	"time"
)

func TestParseKeepAlive(t *testing.T) {
	tests := []struct {
		in        string
		idle      time.Duration
		remaining int
	}{
		{"timeout=5, max=100", 4 * time.Second, 100},
		{"timeout=1", 500 * time.Millisecond, -1},
		{"timeout=2", time.Second, -1},
		{"Timeout = 60 ,MAX=0", 59 * time.Second, 0},
		{`timeout="10"`, 9 * time.Second, -1},
		{"max=7", -1, 7},
		{"timeout=0", 0, -1},
		{"timeout=-5, max=+3", -1, -1},
		{"timeout=99999999999999999999, max=1e3", -1, -1},
		{"timeout, max", -1, -1},
		{"", -1, -1},
	}
	for _, tt := range tests {
		idle, remaining := parseKeepAlive([]byte(tt.in))
		if idle != tt.idle || remaining != tt.remaining {
			t.Errorf("parseKeepAlive(%q) = %v, %d; want %v, %d", tt.in, idle, remaining, tt.idle, tt.remaining)
		}
	}
}

// FuzzParseKeepAlive: an upstream's Keep-Alive field never makes the parser
// panic or announce a negative limit.
func FuzzParseKeepAlive(f *testing.F) {
	for _, s := range []string{"timeout=5, max=100", "timeout=1", `max="3"`, "timeout=,,max", "timeout=999999999"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		idle, remaining := parseKeepAlive(v)
		if idle < -1 || remaining < -1 {
			t.Fatalf("parseKeepAlive(%q) = %v, %d", v, idle, remaining)
		}
	})
}
