package rig

import (
	"os"
	"testing"
)

func TestVmRSS(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         uint64
	}{
		{"process", "Name:\tsluice\nState:\tS (sleeping)\nVmPeak:\t 1260496 kB\nVmHWM:\t   13736 kB\nVmRSS:\t   12308 kB\nRssAnon:\t    4116 kB\n", 12308},
		{"last line, no newline", "Name:\tsluice\nVmRSS:\t7 kB", 7},
		{"kernel thread, no VmRSS", "Name:\tkthreadd\nState:\tS (sleeping)\nThreads:\t1\n", 0},
		{"VmHWM is not VmRSS", "VmHWM:\t   13736 kB\n", 0},
		{"not a number", "VmRSS:\t   many kB\n", 0},
		{"empty", "", 0},
	} {
		if got := vmRSS(tc.status); got != tc.want {
			t.Errorf("%s: vmRSS = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestRSSKB(t *testing.T) {
	if kb := RSSKB(os.Getpid()); kb == 0 {
		t.Errorf("RSSKB(this process) = 0")
	}
	if kb := RSSKB(-1); kb != 0 {
		t.Errorf("RSSKB(-1) = %d, want 0", kb)
	}
}

func TestCPUSeconds(t *testing.T) {
	stat := "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 100 1000 100"
	got, err := cpuSeconds(stat)
	if err != nil || got != 3 {
		t.Errorf("cpuSeconds = %v, %v; want 3 (250 + 50 ticks)", got, err)
	}
	if _, err := cpuSeconds("1234 (x) S 1"); err == nil {
		t.Error("a short stat line read without an error")
	}
	if s, err := CPUSeconds(os.Getpid()); err != nil || s < 0 {
		t.Errorf("CPUSeconds(self) = %v, %v", s, err)
	}
}
