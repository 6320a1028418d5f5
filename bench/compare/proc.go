package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a program started by the benchmark, in a process group of
// its own so that it and anything it forks (nginx's worker) can be
// killed together. Its output goes to a log file in the temp dir.
type child struct {
	name  string
	log   string // file holding the child's standard output and error
	cmd   *exec.Cmd
	owner *children
	done  chan struct{} // closed when the process has exited
	err   error         // the Wait result; valid once done is closed
	once  sync.Once
}

// children tracks the children running, so that all of them can be
// killed on exit, on an error or on a signal. It keeps their process
// groups listed in a file for the watchdog, which kills them should
// this program die without cleaning up (SIGKILL).
type children struct {
	mu    sync.Mutex
	list  []*child
	pgids string // the file listing the live process groups; "" for none
}

// start runs argv with env added to this program's environment. The
// child gets its own process group and SIGKILL should this program
// die; nginx's worker, which does not get it, is left to the watchdog.
func (cs *children) start(name, logPath string, env []string, argv ...string) (*child, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, log: logPath, cmd: cmd, owner: cs, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	cs.list = append(cs.list, c)
	cs.writePgids()
	return c, nil
}

// writePgids rewrites the watchdog's list; cs.mu must be held.
func (cs *children) writePgids() {
	if cs.pgids == "" {
		return
	}
	var b strings.Builder
	for _, c := range cs.list {
		fmt.Fprintln(&b, c.pid())
	}
	tmp := cs.pgids + ".new"
	if os.WriteFile(tmp, []byte(b.String()), 0o644) == nil {
		os.Rename(tmp, cs.pgids)
	}
}

// pid is the child's process id, which is also its process group id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// alive reports whether the child's main process is still running.
func (c *child) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// stop ends the child's whole process group and forgets the child:
// SIGTERM, so that nginx's master reaps its worker instead of leaving
// it to init as a zombie, and SIGKILL if the main process has not
// exited after a short wait. Only the first call does anything: the group is
// never signalled after it is gone, when its id could name someone
// else's.
func (c *child) stop() {
	c.once.Do(func() {
		syscall.Kill(-c.pid(), syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(3 * time.Second):
			syscall.Kill(-c.pid(), syscall.SIGKILL)
			select {
			case <-c.done:
			case <-time.After(5 * time.Second):
			}
		}
		cs := c.owner
		cs.mu.Lock()
		defer cs.mu.Unlock()
		cs.list = slices.DeleteFunc(cs.list, func(x *child) bool { return x == c })
		cs.writePgids()
	})
}

// logTail is the end of the child's log, for error messages.
func (c *child) logTail() string {
	b, _ := os.ReadFile(c.log)
	b = bytes.TrimSpace(b)
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return string(b)
}

// stopAll stops every child still running.
func (cs *children) stopAll() {
	cs.mu.Lock()
	list := slices.Clone(cs.list)
	cs.mu.Unlock()
	for _, c := range list {
		c.stop()
	}
}

// watchdogScript waits for the process $1 to end, then kills the
// process groups listed in $2/pgids and, if $3 is "rm", removes $2.
const watchdogScript = `while kill -0 "$1" 2>/dev/null; do sleep 1; done
if [ -f "$2/pgids" ]; then
	for g in $(cat "$2/pgids"); do kill -KILL "-$g" 2>/dev/null; done
fi
[ "$3" = rm ] && rm -rf -- "$2"
exit 0
`

// startWatchdog starts a shell that outlives this program and cleans up
// after it if it is killed with SIGKILL, which no handler sees. It is
// not one of the children: a normal exit kills it last.
func startWatchdog(dir string, remove bool) (*exec.Cmd, error) {
	rm := "keep"
	if remove {
		rm = "rm"
	}
	cmd := exec.Command("sh", "-c", watchdogScript, "watchdog", strconv.Itoa(os.Getpid()), dir, rm)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go cmd.Wait()
	return cmd, nil
}

// usage is what /proc says about one process group.
type usage struct {
	ticks uint64 // utime+stime of every process in the group, clock ticks
	rssKB uint64 // sum of VmRSS
	hwmKB uint64 // sum of VmHWM (peak RSS)
	procs int
}

// groupUsage sums CPU time and memory over the processes whose process
// group is pgid. Summing RSS counts pages shared between processes
// (nginx's master and worker) twice; for the one-process proxies it is
// exact.
func groupUsage(pgid int) usage {
	var u usage
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return u
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		pgrp, ticks, ok := parseStat(st)
		if !ok || pgrp != pgid {
			continue
		}
		u.procs++
		u.ticks += ticks
		rss, hwm := readStatus(pid)
		u.rssKB += rss
		u.hwmKB += hwm
	}
	return u
}

// parseStat returns the process group and utime+stime from the text of
// /proc/PID/stat. The command name, field 2, is in parentheses and may
// hold spaces, so fields are counted from the last ')'.
func parseStat(b []byte) (pgrp int, ticks uint64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): pgrp is field 5, utime 14, stime 15.
	if len(f) < 13 {
		return 0, 0, false
	}
	pgrp, err1 := strconv.Atoi(f[2])
	ut, err2 := strconv.ParseUint(f[11], 10, 64)
	stime, err3 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, false
	}
	return pgrp, ut + stime, true
}

// readStatus returns VmRSS and VmHWM, in KiB, from /proc/PID/status.
func readStatus(pid int) (rssKB, hwmKB uint64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		if k == "VmRSS" {
			rssKB = n
		} else {
			hwmKB = n
		}
	}
	return rssKB, hwmKB
}

// cpuTimes is the busy and total jiffies of each CPU, from /proc/stat.
type cpuTimes struct {
	busy, total []uint64
}

func readCPUTimes() cpuTimes {
	var t cpuTimes
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		// user nice system idle iowait irq softirq steal guest guest_nice:
		// guest time is already in user and nice; steal (the hypervisor
		// running something else) is time but not work.
		var sum, notBusy uint64
		for i, s := range f[1:] {
			n, _ := strconv.ParseUint(s, 10, 64)
			switch i {
			case 8, 9:
				continue
			case 3, 4, 7:
				notBusy += n
			}
			sum += n
		}
		t.busy = append(t.busy, sum-notBusy)
		t.total = append(t.total, sum)
	}
	return t
}

// busySince is the share of time CPU cpu was busy between t0 and t,
// with anything running on it counted; -1 if unknown.
func (t cpuTimes) busySince(t0 cpuTimes, cpu int) float64 {
	if cpu >= len(t.busy) || cpu >= len(t0.busy) || t.total[cpu] <= t0.total[cpu] {
		return -1
	}
	return float64(t.busy[cpu]-t0.busy[cpu]) / float64(t.total[cpu]-t0.total[cpu])
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat times.
func clockTicks() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return float64(n)
		}
	}
	return 100
}

// raiseNoFile raises RLIMIT_NOFILE to want, or as far as the hard limit
// allows, and returns the soft limit now in force. Children inherit it:
// once a program has called Setrlimit, os/exec no longer restores the
// limit it started with.
func raiseNoFile(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Max < want {
		try := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &try) == nil {
			return want, nil
		}
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return lim.Cur, nil
}
