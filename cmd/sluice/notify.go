package main

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// notifier tells systemd what the process does, for a unit of
// Type=notify (sd_notify(3)'s protocol, written by hand): one datagram of
// newline-separated VAR=value assignments to the unix socket named by
// NOTIFY_SOCKET ("@" for the abstract namespace, which Go's net package
// maps). Without NOTIFY_SOCKET it does nothing. sluice run sends READY=1
// once it serves; RELOADING=1 with MONOTONIC_USEC= as a reload begins and
// READY=1 once it is done (whether it applied the file or not); STOPPING=1
// as it drains; and for a binary upgrade, once the new process serves,
// MAINPID= of that process. NOTIFY_SOCKET is left in the environment for
// the new process of an upgrade.
type notifier struct {
	addr string
}

func newNotifier() *notifier { return &notifier{addr: os.Getenv("NOTIFY_SOCKET")} }

// send sends the assignments, one a line.
func (n *notifier) send(assignments ...string) error {
	if n == nil || n.addr == "" {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("NOTIFY_SOCKET %s: %w", n.addr, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Join(assignments, "\n") + "\n")); err != nil {
		return fmt.Errorf("NOTIFY_SOCKET %s: %w", n.addr, err)
	}
	return nil
}

// reloading is RELOADING=1 with the time it began, as systemd's
// Type=notify-reload asks.
func reloading() []string {
	return []string{"RELOADING=1", fmt.Sprintf("MONOTONIC_USEC=%d", monotonicMicros())}
}
