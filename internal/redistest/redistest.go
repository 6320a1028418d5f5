// Package redistest starts a real redis-server for tests, on 127.0.0.1
// and a free port, without persistence.
package redistest

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Server is a redis-server a test started.
type Server struct {
	// Addr is its host:port on 127.0.0.1.
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts redis-server on a free port, without persistence, and
// kills it when the test ends. It skips the test when redis-server is
// missing, unless CI=true, where that fails it.
func Start(t testing.TB) *Server {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is required when CI=true: %v", err)
		}
		t.Skipf("redis-server is missing (Debian: apt-get install redis-server); skipping: %v", err)
	}
	// A free port: listen on port 0, note it, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	t.Cleanup(s.Kill)
	deadline := time.Now().Add(5 * time.Second)
	for !s.ping() {
		select {
		case <-s.done:
			t.Fatal("redis-server exited at start")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for redis-server to answer PING")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s
}

// ping reports whether the server answers PING.
func (s *Server) ping() bool {
	nc, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return false
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(time.Second))
	io.WriteString(nc, "PING\r\n")
	line, _ := bufio.NewReader(nc).ReadString('\n')
	return line == "+PONG\r\n"
}

// Kill stops the server at once (SIGKILL) and waits for it to exit.
func (s *Server) Kill() {
	s.cmd.Process.Kill()
	<-s.done
}
