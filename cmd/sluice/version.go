package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// The release build stamps these (scripts/release: go build -ldflags
// "-X main.version=v1.2.3 -X main.commit=SHA -X main.date=TIME"). Each
// left empty is taken from what the go command embedded in the binary
// (runtime/debug.ReadBuildInfo), when it did.
var (
	version = "" // v1.2.3, or what git describe says of an untagged commit
	commit  = "" // the full revision
	date    = "" // the commit's time, RFC 3339, UTC
)

// buildInfo says what this binary was built from: the one source of what
// sluice version prints and of what sluice run logs at start.
type buildInfo struct {
	// Version is the stamped version, else the main module's version
	// as the go command stamped it (a tag, or a pseudo-version from the
	// commit), else "(devel)": never empty.
	Version string
	// Module is the main module's path, "unknown" without build info.
	Module string
	// Revision is the commit; "" when unknown (a build outside a git
	// checkout, or with -buildvcs=false, and not stamped).
	Revision string
	// Modified says the tree had uncommitted changes (VCS info only).
	Modified bool
	// Time is the commit's time; "" when unknown.
	Time string
	// Go and Platform are the Go version and GOOS/GOARCH.
	Go, Platform string
}

// currentBuild returns this binary's buildInfo.
func currentBuild() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return readBuild(bi, buildInfo{Version: version, Revision: commit, Time: date},
		runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
}

// readBuild fills what stamped leaves out from bi, which may be nil (a
// binary built without module support).
func readBuild(bi *debug.BuildInfo, stamped buildInfo, goVersion, platform string) buildInfo {
	b := stamped
	b.Module, b.Go, b.Platform = "unknown", goVersion, platform
	if bi != nil {
		b.Module = bi.Main.Path
		if b.Version == "" {
			b.Version = bi.Main.Version
		}
		var rev, at string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		// The VCS info describes the tree built; stamped values, when
		// given, are the release script's word for the same thing.
		if b.Revision == "" {
			b.Revision, b.Modified = rev, modified
		}
		if b.Time == "" {
			b.Time = at
		}
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	return b
}

// String is what sluice version prints: the version, the module, the
// revision (with "+modified" when the tree had uncommitted changes) and
// its time, and the Go version and platform.
func (b buildInfo) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "sluice %s\n", b.Version)
	fmt.Fprintf(&s, "module   %s\n", b.Module)
	rev := b.Revision
	switch {
	case rev == "":
		rev = "unknown (built outside a git checkout, or with -buildvcs=false)"
	case b.Modified:
		rev += "+modified"
	}
	fmt.Fprintf(&s, "revision %s\n", rev)
	if b.Time != "" {
		fmt.Fprintf(&s, "time     %s\n", b.Time)
	}
	fmt.Fprintf(&s, "go       %s %s\n", b.Go, b.Platform)
	return s.String()
}

// logAttrs are the attributes of the start's log line that say which
// binary runs.
func (b buildInfo) logAttrs() []any {
	attrs := []any{"version", b.Version}
	if b.Revision != "" {
		rev := b.Revision
		if b.Modified {
			rev += "+modified"
		}
		attrs = append(attrs, "revision", rev)
	}
	return attrs
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	if !noFlags("version", args, stderr) {
		return 2
	}
	fmt.Fprint(stdout, currentBuild())
	return 0
}
