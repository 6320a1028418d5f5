package logbuf

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
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

func TestIntervalFlushes(t *testing.T) {
	var r recorder
	b := New(&r, 1<<10, 10*time.Millisecond)
	defer b.Close()
	b.Write([]byte("a\n"))
	for i := 0; len(r.got()) == 0; i++ {
		if i == 1000 {
			t.Fatal("a buffered line was not written within the interval (waited 10 s)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The timer is armed again by the next line.
	b.Write([]byte("b\n"))
	for i := 0; len(r.got()) == 1; i++ {
		if i == 1000 {
			t.Fatal("a second line was not written within the interval (waited 10 s)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := strings.Join(r.got(), "|"); got != "a\n|b\n" {
		t.Errorf("writes = %q", got)
	}
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
