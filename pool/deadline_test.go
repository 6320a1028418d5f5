package pool

import (
	"net"
	"testing"
	"time"
)

// deadlines records the read deadlines set on it.
type deadlines struct {
	net.Conn
	set []time.Time
}

func (d *deadlines) SetReadDeadline(t time.Time) error { d.set = append(d.set, t); return nil }
func (d *deadlines) SetDeadline(t time.Time) error     { d.set = append(d.set, t); return nil }

// ReadDeadlineWithin sets a deadline only when the one it set last is out
// of the window asked for, or something else set one since.
func TestReadDeadlineWithin(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const slack = time.Second
	steps := []struct {
		name  string
		other bool          // another deadline is set first
		by    time.Duration // after t0
		want  time.Duration // the deadline set (after t0); -1 for none
	}{
		{"first", false, 60 * time.Second, 61 * time.Second},
		{"within the window", false, 60*time.Second + 500*time.Millisecond, -1},
		{"at its end", false, 61 * time.Second, -1},
		{"past it", false, 61*time.Second + time.Millisecond, 62*time.Second + time.Millisecond},
		{"earlier than the window", false, 10 * time.Second, 11 * time.Second},
		{"after another deadline", true, 10 * time.Second, 11 * time.Second},
	}
	d := &deadlines{}
	c := &Conn{Conn: d}
	for _, s := range steps {
		if s.other {
			c.SetReadDeadline(t0)
		}
		before := len(d.set)
		c.ReadDeadlineWithin(t0.Add(s.by), slack)
		switch got := d.set[before:]; {
		case s.want < 0 && len(got) != 0:
			t.Errorf("%s: set %v, want none", s.name, got[0].Sub(t0))
		case s.want >= 0 && (len(got) != 1 || !got[0].Equal(t0.Add(s.want))):
			t.Errorf("%s: set %v, want %v", s.name, got, s.want)
		}
	}
}
