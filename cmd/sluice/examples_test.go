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
	const file = "../../examples/django/sluice.yaml"
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
	_, after, ok := strings.Cut(string(readme), "[`examples/django/sluice.yaml`](examples/django/sluice.yaml)")
	if !ok {
		t.Fatal("the README does not link examples/django/sluice.yaml")
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if block, _, _ = strings.Cut(block, "```\n"); !ok || block != config {
		t.Errorf("the README's config after its link to examples/django/sluice.yaml is not the file's:\n%s\nwant\n%s", block, config)
	}
}
