// Command upgrade measures what clients see while sluice replaces its own
// binary: wrk drives sluice for a while, on kept-alive connections and on
// a new connection per request (Connection: close), and sluice is upgraded
// (SIGUSR2) a few times, evenly spaced. It prints each wrk's requests,
// rate, socket errors and non-2xx answers, and each upgrade's old and new
// process ids.
//
//	go run ./bench/upgrade [-duration 30s] [-upgrades 3] [-conns 32] [-fresh 8] [-sluice BIN]
//
// The upstream is an in-process net/http server answering "ok"; sluice is
// built from ./cmd/sluice unless -sluice names a binary. Everything
// listens on 127.0.0.1 and runs in a temp dir. Linux only (bench/internal/rig).
// wrk must be installed (Debian's package wrk).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/bench/internal/rig"
)

func main() {
	duration := flag.Duration("duration", 30*time.Second, "how long wrk runs")
	upgrades := flag.Int("upgrades", 3, "binary upgrades, evenly spaced over the run")
	conns := flag.Int("conns", 32, "wrk connections kept alive")
	fresh := flag.Int("fresh", 8, "wrk connections that send Connection: close (a new connection per request)")
	bin := flag.String("sluice", "", "the sluice binary (default: build ./cmd/sluice)")
	keep := flag.Bool("keep", false, "keep the temp dir")
	flag.Parse()
	if err := run(*duration, *upgrades, *conns, *fresh, *bin, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "upgrade:", err)
		os.Exit(1)
	}
}

func run(duration time.Duration, upgrades, conns, fresh int, bin string, keep bool) error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("wrk is not installed (apt-get install wrk): %w", err)
	}
	dir, remove, err := rig.TempDir("sluice-upgrade-", keep)
	if err != nil {
		return err
	}
	defer remove()
	if bin, err = rig.Binary(bin, dir); err != nil {
		return err
	}
	up, err := rig.ServeOK()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", rig.FreePort())
	pidFile := filepath.Join(dir, "sluice.pid")
	config := fmt.Sprintf("listen: [{address: %s}]\naccess_log: {enabled: false}\npid_file: %s\n"+
		"routes: [{upstream: app}]\nupstreams:\n  app:\n    servers: [{address: %s}]\n", addr, pidFile, up)
	s, err := rig.Start(bin, filepath.Join(dir, "run"), addr, config)
	if err != nil {
		return err
	}
	defer func() { // the process serving last, which Start did not start
		if pid, err := readPID(pidFile); err == nil && pid != s.Pid {
			syscall.Kill(pid, syscall.SIGTERM)
		}
		s.Stop()
	}()
	ctx := context.Background()
	if err := s.WaitServing(ctx, func() error { return get(addr) }); err != nil {
		return err
	}

	var wg sync.WaitGroup
	outs := make([]string, 2)
	errs := make([]error, 2)
	for i, args := range [][]string{
		{"-t", "2", "-c", strconv.Itoa(conns)},
		{"-t", "1", "-c", strconv.Itoa(fresh), "-H", "Connection: close"},
	} {
		if args[3] == "0" {
			continue
		}
		args = append(args, "-d", duration.String(), "--timeout", "5s", "http://"+addr+"/")
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := exec.Command("wrk", args...).CombinedOutput()
			outs[i], errs[i] = string(out), err
		}()
	}
	start := time.Now()
	for i := 1; i <= upgrades; i++ {
		rig.SleepUntil(ctx, start.Add(duration*time.Duration(i)/time.Duration(upgrades+1)))
		old, err := readPID(pidFile)
		if err != nil {
			return err
		}
		syscall.Kill(old, syscall.SIGUSR2)
		began := time.Now()
		for {
			if pid, err := readPID(pidFile); err == nil && pid != old {
				fmt.Printf("upgrade %d at %4.1fs: pid %d -> %d, ready in %v\n", i, began.Sub(start).Seconds(), old, pid, time.Since(began).Round(time.Millisecond))
				break
			}
			if time.Since(began) > 30*time.Second {
				return fmt.Errorf("upgrade %d: no new process in 30 s (see %s)", i, s.Log)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wg.Wait()
	for i, name := range []string{fmt.Sprintf("kept-alive (%d conns)", conns), fmt.Sprintf("Connection: close (%d conns)", fresh)} {
		if outs[i] == "" && errs[i] == nil {
			continue
		}
		if errs[i] != nil {
			return fmt.Errorf("wrk %s: %v\n%s", name, errs[i], outs[i])
		}
		fmt.Printf("%-30s %s\n", name, summary(outs[i]))
	}
	return nil
}

var (
	requestsRe = regexp.MustCompile(`(\d+) requests in ([\d.]+\w+)`)
	rateRe     = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	socketRe   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	non2xxRe   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// summary is wrk's output in one line: requests, rate, socket errors and
// non-2xx answers (0 when wrk does not print them).
func summary(out string) string {
	field := func(re *regexp.Regexp, i int, def string) string {
		if m := re.FindStringSubmatch(out); m != nil {
			return m[i]
		}
		return def
	}
	return fmt.Sprintf("requests %s in %s, %s/s; errors: connect %s, read %s, write %s, timeout %s; non-2xx %s",
		field(requestsRe, 1, "?"), field(requestsRe, 2, "?"), field(rateRe, 1, "?"),
		field(socketRe, 1, "0"), field(socketRe, 2, "0"), field(socketRe, 3, "0"), field(socketRe, 4, "0"),
		field(non2xxRe, 1, "0"))
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// get sends one GET to addr and wants 200.
func get(addr string) error {
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
