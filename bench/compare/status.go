package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// statusPath is where the upstream nginx serves its stub_status page,
// whose accepts counter tells how many connections the proxies opened
// to it.
const statusPath = "/nginx_status"

// hasStubStatus reports whether the nginx binary was built with the
// stub_status module; without it, a config naming stub_status would not
// load.
func hasStubStatus(nginx string) bool {
	out, _ := exec.Command(nginx, "-V").CombinedOutput()
	return strings.Contains(string(out), "with-http_stub_status_module")
}

// stubStatus is nginx's stub_status page.
type stubStatus struct {
	active, accepts, handled, requests int64
}

// parseStubStatus reads the page nginx's stub_status writes:
//
//	Active connections: 1
//	server accepts handled requests
//	 7 7 12
//	Reading: 0 Writing: 1 Waiting: 0
//
// Anything else is an error: a figure taken from a page it does not
// understand would be a wrong number in the table.
func parseStubStatus(page []byte) (stubStatus, error) {
	var st stubStatus
	lines := strings.Split(string(page), "\n")
	active := false
	for i, line := range lines {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "Active" && f[1] == "connections:":
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return st, fmt.Errorf("stub_status: active connections %q: %w", f[2], err)
			}
			st.active, active = n, true
		case strings.Join(f, " ") == "server accepts handled requests":
			if !active {
				return st, errors.New("stub_status: no active connections line before the counters")
			}
			if i+1 >= len(lines) {
				return st, errors.New("stub_status: no counters after their names")
			}
			c := strings.Fields(lines[i+1])
			if len(c) != 3 {
				return st, fmt.Errorf("stub_status: counters %q: want 3 numbers", lines[i+1])
			}
			var n [3]int64
			for k := range n {
				v, err := strconv.ParseInt(c[k], 10, 64)
				if err != nil || v < 0 {
					return st, fmt.Errorf("stub_status: counters %q: %q is not a count", lines[i+1], c[k])
				}
				n[k] = v
			}
			st.accepts, st.handled, st.requests = n[0], n[1], n[2]
			return st, nil
		}
	}
	return st, errors.New("stub_status: no \"server accepts handled requests\" line")
}

// readStubStatus fetches the upstream's stub_status page on a
// connection of its own (Connection: close), which the page's accepts
// counter already includes.
func readStubStatus(upstream string) (stubStatus, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + upstream + statusPath)
	if err != nil {
		return stubStatus{}, err
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return stubStatus{}, fmt.Errorf("stub_status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return stubStatus{}, fmt.Errorf("stub_status: status %d: %q", resp.StatusCode, firstLine(string(page)))
	}
	return parseStubStatus(page)
}

// connsBetween is the number of connections the upstream accepted
// between two reads of its accepts counter, not counting the reads'
// own: before counts its own connection already, after counts its own,
// which is subtracted. A counter that did not grow by at least the
// second read's connection means the figures are not what they seem
// (an upstream restarted, another nginx answering).
func connsBetween(before, after int64) (int64, error) {
	n := after - before - 1
	if n < 0 {
		return 0, fmt.Errorf("stub_status: accepts went from %d to %d, which cannot include the second read's own connection", before, after)
	}
	return n, nil
}
