package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestDjangoExampleConfig: examples/django/sluice.yaml is valid, and the
// README shows it as it is (its leading comment aside). Package e2e runs
// it (TestDjangoExample).
func TestDjangoExampleConfig(t *testing.T) {
	checkExampleConfig(t, "examples/django/sluice.yaml")
}

// TestQuickstartExampleConfig: examples/quickstart/sluice.yaml is valid,
// and the README's Quickstart shows it as it is (its leading comment
// aside). TestQuickstartExample runs it.
func TestQuickstartExampleConfig(t *testing.T) {
	checkExampleConfig(t, "examples/quickstart/sluice.yaml")
}

// checkExampleConfig checks that the config file at path (from the
// repository's root) passes sluice validate, and that the first YAML block
// after the README's first link to it is the file from its "listen:" on.
func checkExampleConfig(t *testing.T, path string) {
	t.Helper()
	file := "../../" + path
	t.Setenv("STATE_DIRECTORY", t.TempDir()) // the local CA's storage, checked, not made
	var stdout, stderr bytes.Buffer
	if code := run([]string{"validate", "-c", file}, &stdout, &stderr); code != 0 {
		t.Fatalf("sluice validate %s: exit %d\n%s", file, code, stderr.String())
	}
	example, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	config := string(example[bytes.Index(example, []byte("\nlisten:"))+1:])
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	link := "[`" + path + "`](" + path + ")"
	_, after, ok := strings.Cut(string(readme), link)
	if !ok {
		t.Fatalf("the README does not link %s", path)
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if block, _, _ = strings.Cut(block, "```\n"); !ok || block != config {
		t.Errorf("the README's config after its link to %s is not the file's:\n%s\nwant\n%s", path, block, config)
	}
}
