// Package gotool builds the module tools that tests run (go.mod's tool
// lines: pebble, h2spec), so that they come from the module proxy with the
// rest of the build and need no install step.
package gotool

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

var built sync.Map // tool name -> *binary

type binary struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of the module tool name, built once per test
// process (go tool -n builds a tool and names its binary without running
// it: a test runs the binary itself, as the process it stops). It fails
// the test when the tool cannot be built.
func Binary(t testing.TB, name string) string {
	t.Helper()
	v, _ := built.LoadOrStore(name, new(binary))
	b := v.(*binary)
	b.once.Do(func() {
		goCmd, err := exec.LookPath("go")
		if err != nil {
			b.err = fmt.Errorf("no go command to build %s with: %v", name, err)
			return
		}
		var stderr bytes.Buffer
		cmd := exec.Command(goCmd, "tool", "-n", name)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			b.err = fmt.Errorf("go tool -n %s: %v\n%s", name, err, stderr.String())
			return
		}
		b.path = strings.TrimSpace(string(out))
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
