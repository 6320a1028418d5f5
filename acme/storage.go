package acme

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/caddyserver/certmagic"
)

// errStopped refuses a storage operation, and so whatever certmagic
// wanted it for, once its Manager is stopping.
var errStopped = errors.New("acme: the manager is stopping")

// storage is a Manager's storage (certmagic's FileStorage, or a fleet's
// Redis), with the operations under way counted, and the locks held.
// certmagic holds a lock for the whole of each operation that obtains or
// renews a certificate (or refreshes its renewal information), and writes
// nothing without going through here; so Stop refuses every operation
// from then on but the release of a lock, and waits for those under way
// and for the locks held (drain): once Stop has returned, the Manager
// touches its storage no more.
type storage struct {
	certmagic.Storage

	mu      sync.Mutex
	busy    int // operations under way, plus locks held
	stopped bool
	idle    *sync.Cond // signalled when busy falls to 0
}

// enter counts an operation about to begin (or a lock about to be
// taken), false when stopped.
func (s *storage) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.busy++
	return true
}

// exit counts an operation ended, or a lock released (or not taken after
// all).
func (s *storage) exit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy--
	if s.busy == 0 && s.idle != nil {
		s.idle.Broadcast()
	}
}

// drain refuses operations from now on and waits until none is under way
// and no lock is held.
func (s *storage) drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.idle == nil {
		s.idle = sync.NewCond(&s.mu)
	}
	for s.busy > 0 {
		s.idle.Wait()
	}
}

func (s *storage) Lock(ctx context.Context, name string) error {
	if !s.enter() {
		return errStopped
	}
	if err := s.Storage.Lock(ctx, name); err != nil {
		s.exit()
		return err
	}
	return nil // counted until Unlock
}

// TryLock implements certmagic.TryLocker, which certmagic prefers where
// it would rather skip a step than wait for another process's lock.
func (s *storage) TryLock(ctx context.Context, name string) (bool, error) {
	if !s.enter() {
		return false, errStopped
	}
	tl, can := s.Storage.(certmagic.TryLocker)
	if !can {
		s.exit()
		return false, errors.New("acme: the storage cannot try a lock")
	}
	ok, err := tl.TryLock(ctx, name)
	if !ok || err != nil {
		s.exit()
	}
	return ok, err
}

// Unlock is never refused: a lock held when Stop began is released.
func (s *storage) Unlock(ctx context.Context, name string) error {
	defer s.exit()
	return s.Storage.Unlock(ctx, name)
}

func (s *storage) Store(ctx context.Context, key string, value []byte) error {
	if !s.enter() {
		return errStopped
	}
	defer s.exit()
	return s.Storage.Store(ctx, key, value)
}

func (s *storage) Load(ctx context.Context, key string) ([]byte, error) {
	if !s.enter() {
		return nil, errStopped
	}
	defer s.exit()
	return s.Storage.Load(ctx, key)
}

func (s *storage) Delete(ctx context.Context, key string) error {
	if !s.enter() {
		return errStopped
	}
	defer s.exit()
	return s.Storage.Delete(ctx, key)
}

func (s *storage) Exists(ctx context.Context, key string) bool {
	if !s.enter() {
		return false
	}
	defer s.exit()
	return s.Storage.Exists(ctx, key)
}

func (s *storage) List(ctx context.Context, path string, recursive bool) ([]string, error) {
	if !s.enter() {
		return nil, errStopped
	}
	defer s.exit()
	return s.Storage.List(ctx, path, recursive)
}

func (s *storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	if !s.enter() {
		return certmagic.KeyInfo{}, errStopped
	}
	defer s.exit()
	return s.Storage.Stat(ctx, key)
}

var (
	_ certmagic.Storage   = (*storage)(nil)
	_ certmagic.TryLocker = (*storage)(nil)
)

// leaf reads the first certificate of the PEM chain stored at key.
func (s *storage) leaf(ctx context.Context, key string) (*x509.Certificate, error) {
	b, err := s.Load(ctx, key)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM certificate", key)
	}
	return x509.ParseCertificate(block.Bytes)
}

// CheckStorage checks that dir can be a Manager's storage: a directory
// that can be written to, or one that can be made (its nearest existing
// parent is a directory that can be written to). On Unix it changes
// nothing: whether a directory can be written to is asked of the system
// (faccessat(2), for the effective user), which knows the process's
// permissions and read-only mounts; elsewhere a file is made in it and
// removed.
func CheckStorage(dir string) error {
	if dir == "" {
		return errors.New("no directory named")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			if parent := filepath.Dir(p); parent != p {
				continue
			}
			return fmt.Errorf("%s: no such directory, nor any parent of it", dir)
		case err != nil:
			return err
		case !fi.IsDir():
			if p == abs {
				return fmt.Errorf("%s: not a directory", dir)
			}
			return fmt.Errorf("%s: cannot be made: %s is not a directory", dir, p)
		}
		if err := writable(p); err != nil {
			if p == abs {
				return fmt.Errorf("%s: cannot be written to: %w", dir, err)
			}
			return fmt.Errorf("%s: cannot be made: %s cannot be written to: %w", dir, p, err)
		}
		return nil
	}
}
