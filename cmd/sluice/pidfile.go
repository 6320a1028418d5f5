package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// writePIDFile writes this process's ID to path, replacing what is there
// in one step (a new file renamed over it), so that a reader finds either
// the old ID or the new one.
func writePIDFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pid_file: %w", err)
	}
	_, err = fmt.Fprintf(tmp, "%d\n", os.Getpid())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("pid_file: %w", err)
	}
	return nil
}

// removePIDFile removes path if it still holds this process's ID: after a
// binary upgrade it is the new process's, which removes it in its turn.
func removePIDFile(path string) {
	if pid, err := readPIDFile(path); err == nil && pid == os.Getpid() {
		os.Remove(path)
	}
}

// readPIDFile returns the process ID written in path.
func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(bytes.TrimRight(b, "\x00"))))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: %q is not a process ID", path, strings.TrimSpace(string(b)))
	}
	return pid, nil
}
