package static

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzNoEscape maps request paths to files as RequestFilter does
// (fileName, then open through the os.Root) in a root holding symbolic
// links out of it, and checks with the kernel's own record of each file
// opened (/proc/self/fd) that it is under the root.
func FuzzNoEscape(f *testing.F) {
	dir := f.TempDir()
	root := filepath.Join(dir, "root")
	for _, d := range []string{root + "/a/b", dir + "/out", dir + "/root2"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for name, data := range map[string]string{"a/b/c.txt": "c", "x.txt": "x", ".env": "e", "../secret": "s", "../out/o": "o", "../root2/r": "r"} {
		os.WriteFile(filepath.Join(root, name), []byte(data), 0o644)
	}
	for name, target := range map[string]string{"up": "..", "abs": dir, "sec": "../secret", "a/b/loop": "../../up",
		"r2": "../root2", "in": "a/b", "a/b/rel": "../../x.txt"} {
		os.Symlink(target, filepath.Join(root, name))
	}
	files, err := New(Options{Root: root, Index: "index.html"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { files.Close() })
	for _, s := range []string{"x.txt", "a/b/c.txt", "up/secret", "abs/secret", "sec", "a/b/loop/secret", "r2/r",
		"in/c.txt", "a/b/rel", "%2e%2e/secret", "up%2fsecret", "a/b/../../../secret", ".env", "in/../../secret"} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, p []byte, hidden bool) {
		name, _, status := fileName(p, hidden)
		if status != 0 {
			return
		}
		file, _, status := files.open(name)
		if status != 0 {
			return
		}
		defer file.Close()
		where, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(file.Fd())))
		if err != nil {
			t.Fatal(err)
		}
		if where != root && !strings.HasPrefix(where, root+"/") {
			t.Fatalf("%q (name %q) opened %s, out of the root %s", p, name, where, root)
		}
	})
}
