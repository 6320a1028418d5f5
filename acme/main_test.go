package acme

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"testing"
)

// TestMain fails the tests when certmagic reported a panic: it recovers
// those of its goroutines (a callback of ours among them) and writes them
// with the log package, where no test would see them.
func TestMain(m *testing.M) {
	var mu sync.Mutex
	var buf bytes.Buffer
	log.SetOutput(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}))
	code := m.Run()
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if strings.Contains(out, "panic") {
		fmt.Fprintf(os.Stderr, "certmagic reported a panic:\n%s", out)
		code = 1
	}
	os.Exit(code)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
