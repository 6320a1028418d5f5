//go:build unix

package upgrade

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// childMode makes the test binary the new process of an upgrade (see
// TestMain): "serve" takes the sockets for the addresses in childAddrs,
// says it is ready and answers each connection with "child" and the
// socket's address; "exit" exits 3 without a word; "hang" never says it
// is ready.
const (
	childMode  = "UPGRADE_TEST_CHILD"
	childAddrs = "UPGRADE_TEST_ADDRS"
)

// TestMain runs the tests, failing them when one leaves a goroutine
// behind (Start's reaper of a child nobody killed, its readiness reader),
// or is the child process of an upgrade.
func TestMain(m *testing.M) {
	switch os.Getenv(childMode) {
	case "":
		goleak.VerifyTestMain(m)
	case "exit":
		os.Exit(3)
	case "hang":
		untilKilled()
		os.Exit(4)
	case "serve":
		in, err := Inherit()
		if err != nil || in == nil {
			fmt.Fprintln(os.Stderr, "inherit:", in, err)
			os.Exit(5)
		}
		for _, a := range strings.Split(os.Getenv(childAddrs), ",") {
			ln, ok, err := in.Take(a)
			if !ok || err != nil {
				fmt.Fprintln(os.Stderr, "take", a, ok, err)
				os.Exit(6)
			}
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					fmt.Fprintf(c, "child %s\n", ln.Addr())
					c.Close()
				}
			}()
		}
		if os.Getenv(envListeners) != "" || os.Getenv(envReady) != "" {
			os.Exit(7) // Inherit unsets them
		}
		in.Ready()
		in.Close()
		untilKilled()
		os.Exit(0)
	}
}

// untilKilled blocks a child until the test kills it (SIGKILL, which ends
// the sleep with the process). The minute only bounds a child whose test
// binary died before killing it; no test waits for it to pass.
func untilKilled() { time.Sleep(time.Minute) }

func self(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func listen(t *testing.T) *net.TCPListener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.(*net.TCPListener)
}

// accepts checks that ln's Accept still ends at its deadline: the
// socket is in non-blocking mode, as Go's poller needs.
func accepts(t *testing.T, ln *net.TCPListener) {
	t.Helper()
	ln.SetDeadline(time.Now().Add(50 * time.Millisecond))
	defer ln.SetDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Accept after the upgrade: %v, want a timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept ignored its deadline: the socket went into blocking mode")
	}
}

// The new process takes the sockets by their configured addresses (two
// on port 0, each getting its own back), says it is ready, and serves on
// them once the old process has closed its copies; the old process's
// listener still honours deadlines.
func TestStartHandsOverSockets(t *testing.T) {
	a, b := listen(t), listen(t)
	t.Setenv(childMode, "serve")
	t.Setenv(childAddrs, "127.0.0.1:0,127.0.0.1:0")
	p, err := Start(context.Background(), self(t), []string{"-test.run=^$"},
		[]Socket{{Address: "127.0.0.1:0", Conn: a}, {Address: "127.0.0.1:0", Conn: b}}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	accepts(t, a)
	for _, ln := range []*net.TCPListener{a, b} {
		addr := ln.Addr().String()
		ln.Close() // the child's copy stays
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dialing %s after the handover: %v", addr, err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if want := "child " + addr + "\n"; line != want {
			t.Errorf("%s answered %q (%v), want %q", addr, line, err, want)
		}
	}
}

// A new process that exits, or is not ready in time, fails Start; the
// old process's socket goes on accepting.
func TestStartFails(t *testing.T) {
	for _, tt := range []struct {
		mode    string
		timeout time.Duration
		want    string
	}{
		{"exit", 30 * time.Second, "exited without becoming ready"},
		{"hang", 200 * time.Millisecond, "not ready within 200ms"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			ln := listen(t)
			t.Setenv(childMode, tt.mode)
			_, err := Start(context.Background(), self(t), []string{"-test.run=^$"},
				[]Socket{{Address: "127.0.0.1:0", Conn: ln}}, tt.timeout)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start: %v, want %q", err, tt.want)
			}
			if tt.mode == "exit" && !errors.Is(err, ErrNotReady) {
				t.Errorf("%v is not ErrNotReady", err)
			}
			accepts(t, ln)
			go func() {
				if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
					c.Close()
				}
			}()
			c, err := ln.Accept()
			if err != nil {
				t.Fatalf("the old listener after a failed upgrade: %v", err)
			}
			c.Close()
		})
	}
}

// A process not started by Start inherits nothing.
func TestInheritNothing(t *testing.T) {
	in, err := Inherit()
	if in != nil || err != nil {
		t.Fatalf("Inherit: %v, %v", in, err)
	}
	if ln, ok, err := in.Take("127.0.0.1:0"); ln != nil || ok || err != nil {
		t.Fatalf("Take on nil: %v %v %v", ln, ok, err)
	}
	if err := in.Ready(); err != nil {
		t.Fatal(err)
	}
	in.Close()
}
