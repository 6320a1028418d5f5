package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// runtimeMem is what sluice's runtime says of its memory: the MemStats
// lines its heap profile ends with ("# HeapInuse = 1234").
type runtimeMem struct {
	heapInuse, heapAlloc, heapIdle, heapReleased, stackInuse, sys, nextGC uint64
}

// memStats reads sluice's MemStats from its admin listener at admin, from
// /debug/pprof/heap?debug=1, which does not force a collection (gc=1
// would, and change what is measured).
func memStats(admin string) (runtimeMem, error) {
	resp, err := http.Get("http://" + admin + "/debug/pprof/heap?debug=1")
	if err != nil {
		return runtimeMem{}, err
	}
	defer resp.Body.Close()
	return parseMemStats(resp.Body)
}

func parseMemStats(r io.Reader) (runtimeMem, error) {
	var m runtimeMem
	fields := map[string]*uint64{
		"HeapInuse": &m.heapInuse, "HeapAlloc": &m.heapAlloc, "HeapIdle": &m.heapIdle,
		"HeapReleased": &m.heapReleased, "Stack": &m.stackInuse, "Sys": &m.sys, "NextGC": &m.nextGC,
	}
	seen := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if p := fields[name]; ok && p != nil {
			value, _, _ = strings.Cut(value, " / ") // "Stack = inuse / sys"
			n, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				return m, fmt.Errorf("MemStats line %q: %w", sc.Text(), err)
			}
			*p = n
			seen++
		}
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if seen < len(fields) {
		return m, fmt.Errorf("the heap profile has %d of the %d MemStats lines wanted", seen, len(fields))
	}
	return m, nil
}

// perConn says where the memory grown since base went, per connection of
// n: the heap's spans in use (and of them the objects allocated, live or
// not yet collected), the free spans the runtime keeps without having
// given them back, and stacks.
func (m runtimeMem) perConn(base runtimeMem, n int) string {
	per := func(now, then uint64) float64 { return (float64(now) - float64(then)) / 1024 / float64(max(n, 1)) }
	kept := func(r runtimeMem) uint64 { return r.heapIdle - r.heapReleased }
	return fmt.Sprintf("  runtime, KiB per connection: heap spans in use %.2f (objects allocated %.2f), free heap kept %.2f, stacks %.2f; heap goal %d MiB",
		per(m.heapInuse, base.heapInuse), per(m.heapAlloc, base.heapAlloc), per(kept(m), kept(base)),
		per(m.stackInuse, base.stackInuse), m.nextGC>>20)
}

// saveHeapProfile writes sluice's heap profile, taken after a collection,
// to file.
func saveHeapProfile(admin, file string) error {
	resp, err := http.Get("http://" + admin + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
