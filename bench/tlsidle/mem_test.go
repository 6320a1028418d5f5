package main

import (
	"strings"
	"testing"
)

func TestParseMemStats(t *testing.T) {
	text := `heap profile: 0: 0 [0: 0] @ heap/1048576

# runtime.MemStats
# Alloc = 109000
# HeapAlloc = 109000
# Sys = 6381584
# HeapIdle = 3416064
# HeapInuse = 450560
# HeapReleased = 3407872
# Stack = 327680 / 327680
# NextGC = 4194304
`
	m, err := parseMemStats(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := runtimeMem{heapInuse: 450560, heapAlloc: 109000, heapIdle: 3416064, heapReleased: 3407872, stackInuse: 327680, sys: 6381584, nextGC: 4194304}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	if _, err := parseMemStats(strings.NewReader("# HeapInuse = 1\n")); err == nil {
		t.Error("a profile without most MemStats lines was taken")
	}
}
