package localca

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// DefaultStorage returns where an Authority is kept unless configured
// otherwise, for the user sluice runs as:
//
//   - under systemd with StateDirectory= (the example unit's
//     /var/lib/sluice), pki in it: $STATE_DIRECTORY/pki;
//   - as root, /var/lib/sluice/pki, beside ACME's default storage;
//   - otherwise in the user's data directory: $XDG_DATA_HOME/sluice/pki,
//     else ~/.local/share/sluice/pki; on macOS ~/Library/Application
//     Support/sluice/pki; on Windows %LocalAppData%\sluice\pki.
//
// Without a home directory it is /var/lib/sluice/pki.
func DefaultStorage() string {
	return defaultStorage(runtime.GOOS, os.Getenv, os.Geteuid(), os.UserHomeDir)
}

func defaultStorage(goos string, env func(string) string, euid int, home func() (string, error)) string {
	const system = "/var/lib/sluice/pki"
	if dirs := env("STATE_DIRECTORY"); dirs != "" {
		// systemd lists one directory per StateDirectory= entry.
		first, _, _ := strings.Cut(dirs, ":")
		if filepath.IsAbs(first) {
			return filepath.Join(first, "pki")
		}
	}
	if euid == 0 {
		return system
	}
	switch goos {
	case "windows":
		if d := env("LocalAppData"); d != "" {
			return filepath.Join(d, "sluice", "pki")
		}
	case "darwin", "ios":
		if h, err := home(); err == nil && h != "" {
			return filepath.Join(h, "Library", "Application Support", "sluice", "pki")
		}
	default:
		if d := env("XDG_DATA_HOME"); filepath.IsAbs(d) {
			return filepath.Join(d, "sluice", "pki")
		}
		if h, err := home(); err == nil && h != "" {
			return filepath.Join(h, ".local", "share", "sluice", "pki")
		}
	}
	return system
}
