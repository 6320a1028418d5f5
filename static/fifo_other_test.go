//go:build !unix

package static

// mkfifo makes nothing where there are no FIFOs: the path is then
// missing, and refused all the same.
func mkfifo(string) error { return nil }
