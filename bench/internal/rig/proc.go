package rig

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// RSSKB returns the resident set size of process pid (VmRSS in
// /proc/PID/status) in KiB, or 0 when it cannot be read: the process has
// exited, say.
func RSSKB(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return vmRSS(string(b))
}

// vmRSS returns the figure of the VmRSS line of status, the text of
// /proc/PID/status ("VmRSS:\t   12308 kB"), in KiB; 0 when there is no
// such line (a kernel thread, a zombie) or its figure is not a number.
func vmRSS(status string) uint64 {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// RaiseNoFile makes the soft RLIMIT_NOFILE at least want, raising it no
// further than the hard limit. When the hard limit is below want, it
// changes nothing and returns an error that tells the user to lower flags,
// the command-line flags that set how many connections are opened.
//
// Go's runtime raises the soft limit to the hard one at start, so this
// mostly checks the hard limit. A child started by os/exec gets the soft
// limit this program started with, unless the limit was set here; sluice,
// a Go program, raises its own.
func RaiseNoFile(want uint64, flags string) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= want {
		return nil
	}
	if lim.Max < want {
		return errors.New("RLIMIT_NOFILE's hard limit is below " + strconv.FormatUint(want, 10) + ": lower " + flags)
	}
	lim.Cur = want
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

// CPUSeconds returns the CPU time process pid has used, user and system
// (utime and stime of /proc/PID/stat, in clock ticks of 1/100 s).
func CPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return cpuSeconds(string(b))
}

// cpuSeconds reads utime and stime from stat, the text of /proc/PID/stat,
// whose second field (the command, in parentheses) may hold spaces.
func cpuSeconds(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("rig: /proc/PID/stat without a command")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, errors.New("rig: /proc/PID/stat too short")
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("rig: /proc/PID/stat: utime or stime not a number")
	}
	return float64(u+s) / 100, nil
}
