package cache

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// Disk is a store that keeps responses in a directory, across restarts,
// bounded in bytes, evicting by W-TinyLFU as Memory does.
//
// Each response is a file of its own, written whole under a temporary name
// and renamed into place, then recorded in an index, an append-only log of
// what the directory holds, each record with its checksum: a crash (kill
// -9, a power loss) leaves at worst a file not in the index, which is
// removed, or an index record cut short, which is dropped; never a torn
// file that will be served. A restart reads the index alone, not the
// files; the first time a file is served after a restart its checksum is
// checked against its body, so that a file damaged meanwhile (a power
// loss before the kernel wrote it out) is dropped instead. Bodies are
// served from their files (sendfile(2) where the client's connection
// allows).
//
// One process at a time may use a directory (a lock on it says which).
type Disk struct {
	dir       string
	capacity  atomic.Int64
	lru       *otter.Cache[string, *diskEntry]
	idx       *index
	log       *slog.Logger
	seq       atomic.Uint64
	evictions atomic.Uint64
	purged    atomic.Uint64
	closed    atomic.Bool
	unlock    func()
	swept     chan struct{} // closed when the sweep after opening ends

	// mu orders the changes of what the directory holds: the index log,
	// entries (what it says is live) and the files. It is taken before
	// otter's locks, never inside them (otter's deletion hooks that run
	// under its locks touch only idx).
	mu      sync.Mutex
	logf    *os.File
	logSize int64                 // bytes of the index log
	entries map[string]*diskEntry // by hash: what the index says is live
}

// diskEntry is what the index holds of a stored response: its file and
// what purges find it by.
type diskEntry struct {
	hash     string // hex SHA-256 of the key
	file     string // the file's name, under objects/
	size     int64  // the file's size
	url      string
	tags     []string
	discard  time.Time
	verified atomic.Bool // the body matched its checksum (or was written by this process)
	// head is the file's head once read and checked: a file is never
	// rewritten (a new response is a new file and entry), so later hits
	// open the file and read nothing before the body.
	head atomic.Pointer[objectHead]
}

// MinDisk is the smallest disk store: 1 MiB.
const MinDisk = 1 << 20

// DiskOptions configure a disk store.
type DiskOptions struct {
	// Path is the directory, made if missing.
	Path string
	// Size bounds the bytes of its files (at least MinDisk).
	Size int64
	// Log receives what opening and sweeping the directory found (files
	// left by a crash, a damaged index); nil means slog.Default().
	Log *slog.Logger
}

// diskMagic starts every object file: the format and its version.
var diskMagic = [8]byte{'s', 'l', 'u', 'i', 'c', 'e', 0, 1}

// OpenDisk opens (or makes) a disk store: it locks the directory, reads
// its index, and starts a sweep of the files a crash left behind.
func OpenDisk(o DiskOptions) (*Disk, error) {
	if o.Size < MinDisk {
		return nil, fmt.Errorf("cache: a disk store of %d bytes is below the minimum of %d", o.Size, MinDisk)
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	for _, sub := range []string{"", "objects", "tmp"} {
		if err := os.MkdirAll(filepath.Join(o.Path, sub), 0o755); err != nil {
			return nil, fmt.Errorf("cache: disk store: %w", err)
		}
	}
	unlock, err := lockDir(o.Path)
	if err != nil {
		return nil, fmt.Errorf("cache: disk store %s: %w", o.Path, err)
	}
	d := &Disk{dir: o.Path, idx: newIndex(), log: o.Log, unlock: unlock}
	d.capacity.Store(o.Size)
	d.seq.Store(uint64(time.Now().UnixNano()))
	d.lru, err = otter.New(&otter.Options[string, *diskEntry]{
		MaximumWeight: uint64(o.Size),
		Weigher: func(_ string, e *diskEntry) uint32 {
			return uint32(min(e.size, math.MaxUint32))
		},
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, *diskEntry]) time.Duration {
			if d := e.Value.discard; !d.IsZero() {
				return max(time.Until(d), time.Nanosecond)
			}
			return math.MaxInt64
		}),
		OnAtomicDeletion: func(e otter.DeletionEvent[string, *diskEntry]) {
			d.idx.remove(e.Key, e.Value)
			if e.WasEvicted() {
				d.evictions.Add(1)
			}
		},
		// An evicted (or expired) entry's file goes after it, outside
		// otter's locks; Put, Delete and Purge see to the files of the
		// entries they replace or remove themselves.
		OnDeletion: func(e otter.DeletionEvent[string, *diskEntry]) {
			if e.WasEvicted() {
				d.mu.Lock()
				d.drop(e.Value)
				d.mu.Unlock()
			}
		},
	})
	if err != nil {
		unlock()
		return nil, fmt.Errorf("cache: disk store: %w", err)
	}
	entries, err := d.readIndex()
	if err != nil {
		d.lru.StopAllGoroutines()
		unlock()
		return nil, err
	}
	// The map is whole before the first Set: an entry the LRU evicts as
	// the rest go in is dropped by otter's goroutine, under mu.
	d.mu.Lock()
	d.entries = make(map[string]*diskEntry, len(entries))
	for _, e := range entries {
		d.entries[e.hash] = e
		d.idx.add(e.hash, e, e.url, e.tags)
	}
	d.mu.Unlock()
	for _, e := range entries {
		d.lru.Set(e.hash, e)
	}
	d.swept = make(chan struct{})
	go func() {
		defer close(d.swept)
		d.sweep(entries, time.Now())
	}()
	return d, nil
}

// keyHash names a key's entry.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Get returns the response stored under key, its body in its open file.
func (d *Disk) Get(key string) (*Object, error) {
	if d.closed.Load() {
		return nil, ErrClosed
	}
	h := keyHash(key)
	e, ok := d.lru.GetIfPresent(h)
	if !ok {
		return nil, nil
	}
	o, err := d.open(e, key)
	if err != nil {
		// Gone or damaged: dropped, and a miss.
		d.log.Warn("cache: a stored file is unusable; dropped", "dir", d.dir, "file", e.file, "error", err)
		d.remove(h)
		return nil, nil
	}
	return o, nil
}

// open opens e's file and reads its head.
func (d *Disk) open(e *diskEntry, key string) (*Object, error) {
	f, err := os.Open(d.path(e.file))
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Object, error) {
		f.Close()
		return nil, err
	}
	// A file this process has checked is not checked again: files are
	// renamed into place whole and never written after.
	if h := e.head.Load(); h != nil && h.key == key {
		return &Object{Meta: h.meta, Body: Body{Size: h.bodySize, File: f, Offset: h.bodyOff}}, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if fi.Size() != e.size {
		return fail(fmt.Errorf("%d bytes, the index says %d", fi.Size(), e.size))
	}
	head := make([]byte, min(e.size, 8192))
	if _, err := f.ReadAt(head, 0); err != nil {
		return fail(err)
	}
	h, err := parseObjectHead(head, f, e.size)
	if err != nil {
		return fail(err)
	}
	if h.key != key {
		return fail(errors.New("the file holds another key"))
	}
	if !e.verified.Load() {
		crc := crc32.NewIEEE()
		if _, err := io.Copy(crc, io.NewSectionReader(f, h.bodyOff, h.bodySize)); err != nil {
			return fail(err)
		}
		if crc.Sum32() != h.crc {
			return fail(errors.New("its body does not match its checksum"))
		}
		e.verified.Store(true)
	}
	e.head.Store(h)
	return &Object{Meta: h.meta, Body: Body{Size: h.bodySize, File: f, Offset: h.bodyOff}}, nil
}

// objectHead is what an object file says of itself before its body.
type objectHead struct {
	meta     *Meta
	key      string
	crc      uint32
	bodyOff  int64
	bodySize int64
}

// An object file: diskMagic, the head's length (u32), the head (the key's
// length as a uvarint and the key, the body's CRC-32 (u32), the encoded
// Meta), then the body, Meta.Size bytes, to the end of the file.
func parseObjectHead(b []byte, f *os.File, size int64) (*objectHead, error) {
	if len(b) < 12 || !bytes.Equal(b[:8], diskMagic[:]) {
		return nil, errors.New("not an object file")
	}
	n := int64(binary.BigEndian.Uint32(b[8:12]))
	if 12+n > size {
		return nil, errors.New("its head is longer than the file")
	}
	if int64(len(b)) < 12+n {
		nb := make([]byte, 12+n)
		if _, err := f.ReadAt(nb, 0); err != nil {
			return nil, err
		}
		b = nb
	}
	head := b[12 : 12+n]
	kl, k := binary.Uvarint(head)
	if k <= 0 || uint64(len(head)-k) < kl+4 {
		return nil, errors.New("a malformed head")
	}
	h := &objectHead{key: string(head[k : k+int(kl)])}
	rest := head[k+int(kl):]
	h.crc = binary.BigEndian.Uint32(rest)
	m := new(Meta)
	if err := m.UnmarshalBinary(rest[4:]); err != nil {
		return nil, err
	}
	m.served = servedFields(m) // once: the head is kept for later hits
	h.meta = m
	h.bodyOff = 12 + n
	h.bodySize = size - h.bodyOff
	if h.bodySize != m.Size {
		return nil, errors.New("its body is not as long as its head says")
	}
	return h, nil
}

// Put writes o under key: a file under a temporary name, renamed into
// place, then recorded in the index.
func (d *Disk) Put(key string, o *Object) error {
	if d.closed.Load() {
		return ErrClosed
	}
	meta, err := o.Meta.MarshalBinary()
	if err != nil {
		return err
	}
	body := o.Body.Bytes
	var head []byte
	head = binary.AppendUvarint(head, uint64(len(key)))
	head = append(head, key...)
	head = binary.BigEndian.AppendUint32(head, crc32.ChecksumIEEE(body))
	head = append(head, meta...)
	size := int64(12+len(head)) + int64(len(body))
	if size > d.capacity.Load() || size > math.MaxUint32 {
		return nil
	}
	h := keyHash(key)
	name := h[:2] + "/" + h + "-" + strconv.FormatUint(d.seq.Add(1), 36)
	tmp, err := os.CreateTemp(filepath.Join(d.dir, "tmp"), "put-")
	if err != nil {
		return fmt.Errorf("cache: disk store: %w", err)
	}
	w := bufio.NewWriterSize(tmp, 64<<10)
	w.Write(diskMagic[:])
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(head)))
	w.Write(n[:])
	w.Write(head)
	w.Write(body)
	err = w.Flush()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.MkdirAll(filepath.Join(d.dir, "objects", h[:2]), 0o755)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), d.path(name))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("cache: disk store: %w", err)
	}
	e := &diskEntry{hash: h, file: name, size: size, url: o.Meta.URL, tags: o.Meta.Tags, discard: o.Meta.Discard}
	e.verified.Store(true)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.record(recPut, e); err != nil {
		os.Remove(d.path(name))
		return err
	}
	if old := d.entries[h]; old != nil {
		// Its record is superseded by e's; a request reading it goes on.
		os.Remove(d.path(old.file))
	}
	d.entries[h] = e
	d.lru.Compute(h, func(*diskEntry, bool) (*diskEntry, otter.ComputeOp) {
		d.idx.add(h, e, e.url, e.tags)
		return e, otter.WriteOp
	})
	return nil
}

// Update rewrites the response under key with a new Meta, keeping its
// body (read back from its file).
func (d *Disk) Update(key string, m *Meta) error {
	o, err := d.Get(key)
	if err != nil || o == nil {
		return err
	}
	defer o.Close()
	body := make([]byte, o.Body.Size)
	if _, err := o.Body.File.ReadAt(body, o.Body.Offset); err != nil {
		return fmt.Errorf("cache: disk store: %w", err)
	}
	return d.Put(key, &Object{Meta: m, Body: Body{Size: int64(len(body)), Bytes: body}})
}

// Delete removes key.
func (d *Disk) Delete(key string) error {
	d.remove(keyHash(key))
	return nil
}

// remove removes the entry of a hash, and reports whether there was one.
func (d *Disk) remove(h string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entries[h]
	if e == nil {
		return false
	}
	d.drop(e)
	d.lru.Invalidate(h)
	return true
}

// Purge removes the responses p selects.
func (d *Disk) Purge(p Purge) (int, error) {
	n := 0
	for _, h := range d.idx.match(&p) {
		if d.remove(h) {
			n++
		}
	}
	d.purged.Add(uint64(n))
	return n, nil
}

// Stats returns the store's counts.
func (d *Disk) Stats() Stats {
	return Stats{Objects: int64(d.lru.EstimatedSize()), Bytes: int64(d.lru.WeightedSize()),
		Capacity: d.capacity.Load(), Evictions: d.evictions.Load(), Purged: d.purged.Load()}
}

// Resize changes the store's bound, evicting what no longer fits.
func (d *Disk) Resize(size int64) error {
	if size < MinDisk {
		return fmt.Errorf("cache: a disk store of %d bytes is below the minimum of %d", size, MinDisk)
	}
	d.capacity.Store(size)
	d.lru.SetMaximum(uint64(size))
	return nil
}

// Dir returns the store's directory.
func (d *Disk) Dir() string { return d.dir }

// Close stops the store, its files and index kept for the next open.
func (d *Disk) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.lru.StopAllGoroutines()
	<-d.swept // it stops at its next file; the directory is not let go before
	d.mu.Lock()
	err := d.logf.Close()
	d.logf = nil
	d.mu.Unlock()
	d.unlock()
	return err
}

func (d *Disk) path(file string) string { return filepath.Join(d.dir, "objects", file) }

// drop records e gone and removes its file, if the index still says it
// is live, unless the store is closed (what Close leaves in memory stays
// on disk). A request reading the file meanwhile goes on reading it: the
// file leaves the directory, not its open descriptor. Called with mu held.
func (d *Disk) drop(e *diskEntry) {
	if d.closed.Load() || d.entries[e.hash] != e {
		return
	}
	if err := d.record(recDelete, e); err != nil {
		if !errors.Is(err, ErrClosed) {
			d.log.Error("cache: disk store index", "dir", d.dir, "error", err)
		}
		return
	}
	delete(d.entries, e.hash)
	os.Remove(d.path(e.file))
}

// The index: records appended to dir/index, each its length (u32), its
// CRC-32 (u32) and its payload: an op, then for a put the entry.
const (
	recPut    byte = 'P'
	recDelete byte = 'D'
)

func appendRecord(b []byte, op byte, e *diskEntry) []byte {
	p := []byte{op}
	p = appendString(p, e.hash)
	p = appendString(p, e.file)
	if op == recPut {
		p = binary.AppendUvarint(p, uint64(e.size))
		p = appendString(p, e.url)
		p = binary.AppendUvarint(p, uint64(len(e.tags)))
		for _, t := range e.tags {
			p = appendString(p, t)
		}
		var discard int64
		if !e.discard.IsZero() {
			discard = e.discard.UnixNano()
		}
		p = binary.AppendVarint(p, discard)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(p))
	return append(b, p...)
}

// record appends a record to the index, rewriting the index first when
// dead records make up most of it. Called with mu held.
func (d *Disk) record(op byte, e *diskEntry) error {
	if d.logf == nil {
		return ErrClosed
	}
	if d.logSize > 1<<20 && d.logSize > 4*int64(len(d.entries)+1)*256 {
		if err := d.compact(); err != nil {
			d.log.Error("cache: disk store index not compacted", "dir", d.dir, "error", err)
		}
	}
	rec := appendRecord(nil, op, e)
	if _, err := d.logf.Write(rec); err != nil {
		return fmt.Errorf("cache: disk store index: %w", err)
	}
	d.logSize += int64(len(rec))
	return nil
}

// compact rewrites the index with the live entries alone: a new file,
// synced, renamed over the old. Called with mu held.
func (d *Disk) compact() error {
	var b []byte
	for _, e := range d.entries {
		b = appendRecord(b, recPut, e)
	}
	tmp := filepath.Join(d.dir, "index.tmp")
	if err := writeSynced(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "index")); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(d.dir, "index"), os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	d.logf.Close()
	d.logf, d.logSize = f, int64(len(b))
	return nil
}

func writeSynced(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readIndex reads the index into the entries it names, cuts a record
// left half-written by a crash off its end, and opens it to append.
func (d *Disk) readIndex() ([]*diskEntry, error) {
	name := filepath.Join(d.dir, "index")
	b, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cache: disk store index: %w", err)
	}
	live := map[string]*diskEntry{}
	var order []string
	good := 0
	for off := 0; off+8 <= len(b); {
		n := int(binary.BigEndian.Uint32(b[off:]))
		crc := binary.BigEndian.Uint32(b[off+4:])
		if off+8+n > len(b) || crc32.ChecksumIEEE(b[off+8:off+8+n]) != crc {
			break
		}
		op, e, ok := parseRecord(b[off+8 : off+8+n])
		if !ok {
			break
		}
		switch op {
		case recPut:
			if _, seen := live[e.hash]; !seen {
				order = append(order, e.hash)
			}
			live[e.hash] = e
		case recDelete:
			if cur := live[e.hash]; cur != nil && cur.file == e.file {
				delete(live, e.hash)
			}
		}
		off += 8 + n
		good = off
	}
	if good < len(b) {
		d.log.Warn("cache: disk store index ends in a record cut short (a crash); dropped", "dir", d.dir, "bytes", len(b)-good)
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cache: disk store index: %w", err)
	}
	if err := f.Truncate(int64(good)); err != nil {
		f.Close()
		return nil, fmt.Errorf("cache: disk store index: %w", err)
	}
	if _, err := f.Seek(int64(good), io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("cache: disk store index: %w", err)
	}
	d.logf, d.logSize = f, int64(good)
	var entries []*diskEntry
	now := time.Now()
	for _, h := range order {
		if e := live[h]; e != nil {
			if !e.discard.IsZero() && e.discard.Before(now) {
				os.Remove(d.path(e.file))
				continue
			}
			entries = append(entries, e)
		}
	}
	return entries, nil
}

func parseRecord(p []byte) (byte, *diskEntry, bool) {
	if len(p) == 0 {
		return 0, nil, false
	}
	dec := decoder{b: p[1:]}
	e := &diskEntry{hash: dec.string(), file: dec.string()}
	op := p[0]
	if op == recPut {
		e.size = int64(dec.uvarint())
		e.url = dec.string()
		for n := dec.count(); n > 0 && dec.ok(); n-- {
			e.tags = append(e.tags, dec.string())
		}
		if discard := dec.varint(); discard != 0 {
			e.discard = time.Unix(0, discard)
		}
	} else if op != recDelete {
		return 0, nil, false
	}
	if !dec.ok() || len(dec.b) != 0 || len(e.hash) != 64 || !validFileName(e.file) {
		return 0, nil, false
	}
	return op, e, true
}

// validFileName reports whether an index names a file under objects/ as
// Put names them (a damaged index must not name others).
func validFileName(f string) bool {
	dir, base, ok := strings.Cut(f, "/")
	return ok && len(dir) == 2 && strings.HasPrefix(base, dir) && !strings.ContainsAny(base, `/\`) && !strings.Contains(f, "..")
}

// sweep removes the files a crash left behind: temporary ones, and those
// the index does not name, made before the store opened at opened (those
// made since are this process's). A file's time comes from the kernel's
// coarse clock, a tick behind: only files older than two seconds before
// the opening go, and those a crash left just before it stay until the
// next one. It stops at its next file once the store is closed, and Close
// waits for it: the directory is not let go while it removes files.
func (d *Disk) sweep(entries []*diskEntry, opened time.Time) {
	opened = opened.Add(-2 * time.Second)
	known := make(map[string]bool, len(entries))
	for _, e := range entries {
		known[e.file] = true
	}
	if tmps, err := os.ReadDir(filepath.Join(d.dir, "tmp")); err == nil {
		for _, t := range tmps {
			if info, err := t.Info(); err == nil && info.ModTime().Before(opened) {
				os.Remove(filepath.Join(d.dir, "tmp", t.Name()))
			}
		}
	}
	dirs, err := os.ReadDir(filepath.Join(d.dir, "objects"))
	if err != nil {
		return
	}
	removed := 0
	for _, sub := range dirs {
		files, err := os.ReadDir(filepath.Join(d.dir, "objects", sub.Name()))
		if err != nil {
			continue
		}
		for _, f := range files {
			name := sub.Name() + "/" + f.Name()
			if d.closed.Load() {
				return
			}
			if known[name] {
				continue
			}
			if info, err := f.Info(); err != nil || !info.ModTime().Before(opened) {
				continue // written since the store opened
			}
			os.Remove(filepath.Join(d.dir, "objects", name))
			removed++
		}
	}
	if removed > 0 {
		d.log.Info("cache: disk store removed files no index named (left by a crash)", "dir", d.dir, "files", removed)
	}
}
