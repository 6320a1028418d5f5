//go:build !unix

package static

// openFlag is added to the flags a file is opened with (open_unix.go).
const openFlag = 0
