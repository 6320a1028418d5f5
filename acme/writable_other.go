//go:build !unix

package acme

import "os"

// writable reports whether files can be made in dir, by making one and
// removing it: elsewhere than on Unix, nothing answers without trying.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".sluice-check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
