package config

import (
	"errors"
	"os"
	"sync"

	"github.com/sluice-proxy/sluice/internal/logbuf"
	"github.com/sluice-proxy/sluice/pool"
)

// Resources are what NewServer opens beside the proxy server: its
// connection pool and its access log.
type Resources struct {
	pool    *pool.Pool
	ownPool bool           // made by NewServer; a pool given to NewServerPool is its caller's
	log     *logbuf.Writer // nil without an access log
	file    *logFile       // nil when the access log goes to standard error
}

// Close, after the server's Shutdown, writes what the access log holds,
// closes its file and closes the pool (stopping its watcher) unless it was
// given to NewServerPool. It returns the errors joined.
func (r *Resources) Close() error {
	var errs []error
	if r.log != nil {
		errs = append(errs, r.log.Close())
	}
	if r.file != nil {
		errs = append(errs, r.file.Close())
	}
	if r.ownPool {
		r.pool.Close()
	}
	return errors.Join(errs...)
}

// ReopenLogs writes what the access log holds and opens its file again by
// its path, for log rotation: once logrotate has renamed the file, lines
// go to a new file at the path (sluice run does this on SIGUSR1, as nginx
// does). It does nothing when the access log is off or goes to standard
// error. When the path cannot be opened, lines go on to the old file and
// the error is returned.
func (r *Resources) ReopenLogs() error {
	if r.file == nil {
		return nil
	}
	flushErr := r.log.Flush()
	return errors.Join(flushErr, r.file.reopen())
}

// logFile is the access log's file, which reopen swaps for a new one at
// the same path while lines are being written.
type logFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func openLogFile(path string) (*logFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &logFile{path: path, f: f}, nil
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

func (l *logFile) reopen() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.f
	l.f = f
	l.mu.Unlock()
	return old.Close()
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}
