package cache

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/internal/wait"
)

// object makes the response stored under a test's key: its body is a
// function of the key, so that what a store serves can be checked.
func object(key string, size int) *Object {
	body := content(key, size)
	m := &Meta{URL: "http://example.com/" + key, Status: 200, Tags: []string{"t-" + key[:1]},
		RequestTime: time.Now(), ResponseTime: time.Now(), Size: int64(len(body))}
	m.Header.Add("Content-Type", "text/plain")
	m.Header.Add("X-Digest", fmt.Sprintf("%x", sha256.Sum256(body)))
	return &Object{Meta: m, Body: Body{Size: int64(len(body)), Bytes: body}}
}

func content(key string, size int) []byte {
	r := rand.New(rand.NewPCG(uint64(len(key)), uint64(key[len(key)-1])))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	copy(b, key)
	return b
}

// readBody reads an object's body, whichever way it is kept.
func readBody(t testing.TB, o *Object) []byte {
	t.Helper()
	switch {
	case o.Body.File != nil:
		b := make([]byte, o.Body.Size)
		if _, err := o.Body.File.ReadAt(b, o.Body.Offset); err != nil {
			t.Fatal(err)
		}
		return b
	case o.Body.Reader != nil:
		b, err := io.ReadAll(o.Body.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return o.Body.Bytes
}

func openDisk(t testing.TB, dir string, size int64) *Disk {
	t.Helper()
	d, err := OpenDisk(DiskOptions{Path: dir, Size: size})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDiskStore: what is put is got back, across a reopen (from the
// index, without reading the files), purged by URL, prefix and tag, and
// bounded in size.
func TestDiskStore(t *testing.T) {
	dir := t.TempDir()
	d := openDisk(t, dir, 64<<20)
	for i := 0; i < 50; i++ {
		key := fmt.Sprintf("k%03d", i)
		if err := d.Put(key, object(key, 1000+i*100)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(d *Disk, key string, want bool) {
		t.Helper()
		o, err := d.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		if (o != nil) != want {
			t.Fatalf("%s: stored %v, want %v", key, o != nil, want)
		}
		if o == nil {
			return
		}
		defer o.Close()
		i, _ := strconv.Atoi(key[1:])
		if got := readBody(t, o); !bytes.Equal(got, content(key, 1000+i*100)) || o.Meta.URL != "http://example.com/"+key {
			t.Fatalf("%s: a body of %d bytes, URL %s", key, len(got), o.Meta.URL)
		}
	}
	check(d, "k007", true)
	d.Close()
	d = openDisk(t, dir, 64<<20)
	defer d.Close()
	for i := 0; i < 50; i++ {
		check(d, fmt.Sprintf("k%03d", i), true)
	}
	if n, _ := d.Purge(Purge{URLs: []string{"http://example.com/k001"}, Prefixes: []string{"http://example.com/k01"}}); n != 11 {
		t.Errorf("purged %d by URL and prefix, want 11", n)
	}
	check(d, "k001", false)
	check(d, "k015", false)
	check(d, "k020", true)
	if n, _ := d.Purge(Purge{Tags: []string{"t-k"}}); n != 39 {
		t.Errorf("purged %d by tag, want 39", n)
	}
	d.Close()
	d = openDisk(t, dir, 64<<20)
	if st := d.Stats(); st.Objects != 0 {
		t.Errorf("%d objects after the purges and a reopen", st.Objects)
	}
	d.Close()

	// Bounded: 200 objects of 64 KiB in a store of 4 MiB.
	small := openDisk(t, t.TempDir(), 4<<20)
	defer small.Close()
	for i := 0; i < 200; i++ {
		key := fmt.Sprintf("s%03d", i)
		small.Put(key, object(key, 64<<10))
	}
	small.lru.CleanUp()
	if st := small.Stats(); st.Bytes > 4<<20 || st.Evictions == 0 {
		t.Errorf("stats %+v: over the bound, or nothing evicted", st)
	}
	var onDisk int64
	wait.For(t, "evicted files removed", func() bool {
		onDisk = 0
		filepath.Walk(filepath.Join(small.dir, "objects"), func(_ string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				onDisk += fi.Size()
			}
			return nil
		})
		return onDisk <= 4<<20
	})
}

// TestDiskDamage: a store never serves a file that does not hold what the
// index says: one cut short, one whose body changed (checked against its
// checksum the first time it is served after a reopen), one the index
// names for another key; and an index whose last record a crash cut short
// loses that record only.
func TestDiskDamage(t *testing.T) {
	dir := t.TempDir()
	d := openDisk(t, dir, 64<<20)
	for _, k := range []string{"cut", "flipped", "fine"} {
		d.Put(k, object(k, 5000))
	}
	file := func(key string) string {
		e, _ := d.lru.GetIfPresent(keyHash(key))
		return d.path(e.file)
	}
	cut, flipped := file("cut"), file("flipped")
	d.Close()
	os.Truncate(cut, 3000)
	b, _ := os.ReadFile(flipped)
	b[len(b)-10] ^= 0xff
	os.WriteFile(flipped, b, 0o644)
	// A crash in the middle of appending a record.
	f, _ := os.OpenFile(filepath.Join(dir, "index"), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{0, 0, 0, 99, 1, 2})
	f.Close()

	d = openDisk(t, dir, 64<<20)
	defer d.Close()
	for _, tt := range []struct {
		key    string
		served bool
	}{{"cut", false}, {"flipped", false}, {"fine", true}} {
		o, err := d.Get(tt.key)
		if err != nil || (o != nil) != tt.served {
			t.Errorf("%s: served %v (%v), want %v", tt.key, o != nil, err, tt.served)
		}
		if o != nil {
			if !bytes.Equal(readBody(t, o), content(tt.key, 5000)) {
				t.Errorf("%s: the body differs", tt.key)
			}
			o.Close()
		}
	}
	// The index goes on after the cut record.
	d.Put("after", object("after", 10))
	d.Close()
	d = openDisk(t, dir, 64<<20)
	defer d.Close()
	if o, _ := d.Get("after"); o == nil {
		t.Error("a record appended after the cut one was lost")
	} else {
		o.Close()
	}
}

// TestDiskLock: one process (or store) at a time uses a directory.
func TestDiskLock(t *testing.T) {
	dir := t.TempDir()
	d := openDisk(t, dir, MinDisk)
	if _, err := OpenDisk(DiskOptions{Path: dir, Size: MinDisk}); err == nil {
		t.Error("a second store opened the same directory")
	}
	d.Close()
	d = openDisk(t, dir, MinDisk)
	d.Close()
}

// TestDiskKill9: a process putting objects into a disk store is killed
// (SIGKILL) at a random moment in the middle of its writes, ten times;
// after each, the store reopens and every object it serves is byte for
// byte the one put.
func TestDiskKill9(t *testing.T) {
	if os.Getenv("SLUICE_DISK_WRITER") != "" {
		diskWriter(os.Getenv("SLUICE_DISK_WRITER"))
		return
	}
	if testing.Short() {
		t.Skip("ten processes")
	}
	dir := t.TempDir()
	served := 0
	for round := 0; round < 10; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDiskKill9$")
		cmd.Env = append(os.Environ(), "SLUICE_DISK_WRITER="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until it has written a while (it says so), then kill it
		// in the middle of what follows.
		buf := make([]byte, 1)
		for i := 0; i < 20+rand.IntN(100); i++ {
			if _, err := out.Read(buf); err != nil {
				break
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		d := openDisk(t, dir, 16<<20)
		n := 0
		for i := 0; i < 400; i++ {
			key := fmt.Sprintf("obj%d", i)
			o, err := d.Get(key)
			if err != nil {
				t.Fatal(err)
			}
			if o == nil {
				continue
			}
			body := readBody(t, o)
			o.Close()
			if !bytes.Equal(body, content(key, sizeOf(key))) {
				t.Fatalf("round %d: %s served %d bytes that differ from what was put", round, key, len(body))
			}
			n++
		}
		served += n
		d.Close()
	}
	if served == 0 {
		t.Error("no object was ever served")
	}
	t.Logf("%d objects served over ten restarts, all whole", served)
}

func sizeOf(key string) int {
	i, _ := strconv.Atoi(key[3:])
	return 1000 + (i*7919)%200000
}

// diskWriter is the process TestDiskKill9 kills: it puts objects over and
// over (replacing, so that files are renamed over and removed too),
// writing a byte to stdout after each.
func diskWriter(dir string) {
	d, err := OpenDisk(DiskOptions{Path: dir, Size: 16 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for i := 0; ; i++ {
		key := fmt.Sprintf("obj%d", rand.IntN(400))
		d.Put(key, object(key, sizeOf(key)))
		os.Stdout.Write([]byte{'.'})
	}
}

// TestDiskHeadKept: a file's head, kept after the first hit, is that
// file's: an Update (a 304 freshened the response) gives later hits the
// new Meta with the same body, and a reopen reads heads afresh.
func TestDiskHeadKept(t *testing.T) {
	dir := t.TempDir()
	d := openDisk(t, dir, 64<<20)
	o := object("h1", 5000)
	if err := d.Put("h1", o); err != nil {
		t.Fatal(err)
	}
	get := func(d *Disk) (*Meta, []byte) {
		t.Helper()
		g, err := d.Get("h1")
		if err != nil || g == nil {
			t.Fatalf("Get: %v, %v", g, err)
		}
		defer g.Close()
		return g.Meta, readBody(t, g)
	}
	for range 2 { // the second hit uses the kept head
		if m, b := get(d); string(m.Header.Get("X-Version")) != "" || !bytes.Equal(b, o.Body.Bytes) {
			t.Fatalf("before the update: X-Version %q, %d bytes", m.Header.Get("X-Version"), len(b))
		}
	}
	m := *o.Meta
	m.Header = h1.Header{}
	m.Header.CopyFrom(&o.Meta.Header)
	m.Header.Add("X-Version", "2")
	if err := d.Update("h1", &m); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, b := get(d); string(got.Header.Get("X-Version")) != "2" || !bytes.Equal(b, o.Body.Bytes) {
			t.Fatalf("after the update: X-Version %q, %d bytes", got.Header.Get("X-Version"), len(b))
		}
	}
	d.Close()
	d = openDisk(t, dir, 64<<20)
	defer d.Close()
	if got, b := get(d); string(got.Header.Get("X-Version")) != "2" || !bytes.Equal(b, o.Body.Bytes) {
		t.Fatalf("after a reopen: X-Version %q, %d bytes", got.Header.Get("X-Version"), len(b))
	}
}
