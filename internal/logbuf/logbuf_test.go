package logbuf

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder records each write it is given.
type recorder struct {
	mu     sync.Mutex
	writes []string
	err    error
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return 0, r.err
	}
	r.writes = append(r.writes, string(p))
	return len(p), nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...)
}

func TestBatches(t *testing.T) {
	tests := []struct {
		name  string
		size  int
		lines []string
		want  []string // the writes made before Close
	}{
		{"held while they fit", 16, []string{"a\n", "b\n", "c\n"}, nil},
		{"written when the next does not fit", 6, []string{"aa\n", "bb\n", "cc\n"}, []string{"aa\nbb\n"}},
		{"a line as large as the buffer goes through", 4, []string{"a\n", "long\n", "b\n"}, []string{"a\n", "long\n"}},
		{"unbuffered", 0, []string{"a\n", "b\n"}, []string{"a\n", "b\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			b := New(&r, tt.size, time.Hour)
			for _, l := range tt.lines {
				if n, err := b.Write([]byte(l)); n != len(l) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", l, n, err)
				}
			}
			if got := r.got(); strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("writes before Close = %q, want %q", got, tt.want)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(r.got(), ""); got != strings.Join(tt.lines, "") {
				t.Errorf("after Close the log holds %q, want every line in order", got)
			}
		})
	}
}

// TestIntervalFlushes: a batch is written the interval after its first
// line, not a moment before, whatever lines join it; the next line arms
// the timer again. On synctest's clock, to the nanosecond.
func TestIntervalFlushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 10 * time.Millisecond
		var r recorder
		b := New(&r, 1<<10, every)
		defer b.Close()
		b.Write([]byte("a\n"))
		time.Sleep(every / 2)
		b.Write([]byte("b\n")) // joins the batch; the timer stays
		time.Sleep(every/2 - time.Nanosecond)
		synctest.Wait()
		if got := r.got(); len(got) != 0 {
			t.Fatalf("writes %q before the interval ended", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := strings.Join(r.got(), "|"); got != "a\nb\n" {
			t.Fatalf("writes %q at the interval, want the batch", got)
		}
		b.Write([]byte("c\n"))
		time.Sleep(every - time.Nanosecond)
		synctest.Wait()
		if got := len(r.got()); got != 1 {
			t.Fatalf("%d writes before the second interval ended, want 1", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := strings.Join(r.got(), "|"); got != "a\nb\n|c\n" {
			t.Errorf("writes = %q", got)
		}
	})
}

func TestErrorsReported(t *testing.T) {
	r := recorder{err: errors.New("disk full")}
	b := New(&r, 4, time.Hour)
	if _, err := b.Write([]byte("ab\n")); err != nil {
		t.Fatalf("a buffered Write failed: %v", err)
	}
	if _, err := b.Write([]byte("cd\n")); err == nil || err.Error() != "disk full" {
		t.Fatalf("Write that flushed into a failing writer: err = %v", err)
	}
	if err := b.Close(); err == nil {
		t.Fatal("Close of a buffer it could not write: no error")
	}
}

func TestConcurrentLinesStayWhole(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	b := New(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return out.Write(p)
	}), 64, time.Millisecond)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				b.Write([]byte("0123456789\n"))
			}
		}()
	}
	wg.Wait()
	b.Close()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 1600 {
		t.Fatalf("%d lines, want 1600", len(lines))
	}
	for _, l := range lines {
		if l != "0123456789" {
			t.Fatalf("a line was torn: %q", l)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
