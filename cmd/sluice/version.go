package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// version, when set at build time (-ldflags "-X main.version=v1.2.3"),
// is the version sluice version prints, instead of the module's.
var version = ""

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	if !noFlags("version", args, stderr) {
		return 2
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprint(stdout, versionText(bi, version, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH))
	return 0
}

// versionText formats what sluice version prints: the version (override,
// when set, else the module's as the go command stamped it: a tag, a
// pseudo-version, or "(devel)"), the module path, the VCS revision and
// its time (with "+modified" when the tree had uncommitted changes), and
// the Go version and platform. bi may be nil (a binary built without
// module support).
func versionText(bi *debug.BuildInfo, override, goVersion, platform string) string {
	v, module := override, "unknown"
	var rev, at, modified string
	if bi != nil {
		module = bi.Main.Path
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = "+modified"
				}
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sluice %s\n", v)
	fmt.Fprintf(&b, "module   %s\n", module)
	if rev == "" {
		rev = "unknown (built outside a git checkout, or with -buildvcs=false)"
	}
	fmt.Fprintf(&b, "revision %s%s\n", rev, modified)
	if at != "" {
		fmt.Fprintf(&b, "time     %s\n", at)
	}
	fmt.Fprintf(&b, "go       %s %s\n", goVersion, platform)
	return b.String()
}
