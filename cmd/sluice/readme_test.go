package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// The README's tests keep what it shows honest: its commands parse, its
// configs load, its links lead somewhere.

// completeConfig marks, on the line before its fence, a YAML block of the
// README that is a whole config file: TestREADMEConfigs validates it.
const completeConfig = "<!-- complete config: validated by TestREADMEConfigs -->"

// A readmeBlock is one fenced code block of the README.
type readmeBlock struct {
	lang     string // the fence's info string: yaml, sh, "" ...
	line     int    // the line of its first line of content, 1-based
	text     string // its content, as written (indentation included)
	complete bool   // marked as a whole config file
}

// readmeBlocks reads the README's fenced code blocks, and its text
// outside them.
func readmeBlocks(t *testing.T) (blocks []readmeBlock, prose string) {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var (
		in   *readmeBlock
		text strings.Builder
		out  strings.Builder
		prev string
	)
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case in == nil && strings.HasPrefix(trimmed, "```"):
			in = &readmeBlock{lang: strings.TrimPrefix(trimmed, "```"), line: i + 2, complete: strings.TrimSpace(prev) == completeConfig}
			text.Reset()
		case in != nil && trimmed == "```":
			in.text = text.String()
			blocks = append(blocks, *in)
			in = nil
		case in != nil:
			text.WriteString(line)
			text.WriteByte('\n')
		default:
			out.WriteString(line)
			out.WriteByte('\n')
		}
		prev = line
	}
	if in != nil {
		t.Fatalf("README.md:%d: a code block is not closed", in.line-1)
	}
	return blocks, out.String()
}

// TestREADMECommands: every sluice command the README shows, in a shell
// block or inline in its text, is one the binary knows, with flags it
// parses, and a config file under examples/ that exists.
func TestREADMECommands(t *testing.T) {
	blocks, prose := readmeBlocks(t)
	type shown struct {
		where string
		args  []string
	}
	var commands []shown
	for _, b := range blocks {
		if b.lang != "sh" && b.lang != "" {
			continue
		}
		for i, line := range strings.Split(b.text, "\n") {
			if b.lang == "" {
				// An output block: only its prompts are commands.
				var ok bool
				if line, ok = strings.CutPrefix(strings.TrimSpace(line), "$ "); !ok {
					continue
				}
			}
			for _, args := range sluiceInvocations(line) {
				commands = append(commands, shown{fmt.Sprintf("README.md:%d", b.line+i), args})
			}
		}
	}
	for _, m := range regexp.MustCompile("`((?:\\./)?sluice [^`]+)`").FindAllStringSubmatch(prose, -1) {
		for _, args := range sluiceInvocations(strings.ReplaceAll(m[1], "\n", " ")) {
			commands = append(commands, shown{"README.md, inline: " + m[0], args})
		}
	}
	if len(commands) < 10 {
		t.Fatalf("found %d sluice commands in the README; the reader of it must have broken", len(commands))
	}
	names := map[string]bool{}
	for _, c := range commands {
		names[c.args[0]] = true
		if err := parseCommand(c.args); err != nil {
			t.Errorf("%s: sluice %s: %v", c.where, strings.Join(c.args, " "), err)
		}
	}
	for _, want := range []string{"run", "validate", "reload", "upgrade", "demo", "version"} {
		if !names[want] {
			t.Errorf("no sluice %s found in the README", want)
		}
	}
}

// sluiceInvocations returns the arguments of each sluice command in a
// shell line (sluice, ./sluice or go run ./cmd/sluice, at the start of a
// command), up to a comment or the end of the command.
func sluiceInvocations(line string) [][]string {
	if before, _, ok := strings.Cut(line, " #"); ok {
		line = before
	}
	var out [][]string
	var cmd []string
	flush := func() {
		switch {
		case len(cmd) > 1 && (cmd[0] == "sluice" || cmd[0] == "./sluice"):
			out = append(out, cmd[1:])
		case len(cmd) > 3 && cmd[0] == "go" && cmd[1] == "run" && cmd[2] == "./cmd/sluice":
			out = append(out, cmd[3:])
		}
		cmd = nil
	}
	for _, f := range strings.Fields(line) {
		switch f {
		case "&&", "||", ";", "|", "&":
			flush()
			continue
		}
		cmd = append(cmd, f)
	}
	flush()
	return out
}

// parseCommand parses a command's arguments as sluice does, with the
// command's own flag set, and runs nothing.
func parseCommand(args []string) error {
	name, rest := args[0], args[1:]
	if !slices.ContainsFunc(commands, func(c command) bool { return c.name == name }) {
		return fmt.Errorf("unknown command %q", name)
	}
	var stderr bytes.Buffer
	switch name {
	case "run", "validate", "reload", "upgrade":
		f, ok := parseFlags(name, rest, &stderr)
		if !ok {
			return errors.New(strings.TrimSpace(stderr.String()))
		}
		if strings.HasPrefix(f.config, "examples/") {
			if _, err := os.Stat("../../" + f.config); err != nil {
				return err
			}
		}
	case "demo":
		fs, _, _ := demoFlags(&stderr)
		if err := fs.Parse(rest); err != nil {
			return err
		}
	case "help":
		if len(rest) > 0 && !slices.ContainsFunc(commands, func(c command) bool { return c.name == rest[0] }) {
			return fmt.Errorf("help for an unknown command %q", rest[0])
		}
	default:
		if !noFlags(name, rest, &stderr) {
			return errors.New(strings.TrimSpace(stderr.String()))
		}
	}
	return nil
}

// TestREADMEConfigs: every YAML block of the README is YAML, and each one
// marked as a whole config file passes sluice validate.
func TestREADMEConfigs(t *testing.T) {
	blocks, _ := readmeBlocks(t)
	t.Setenv("STATE_DIRECTORY", t.TempDir()) // a local CA's storage, checked, not made
	dir := t.TempDir()
	var yamls, complete int
	for _, b := range blocks {
		if b.lang != "yaml" {
			continue
		}
		yamls++
		var v any
		if err := yaml.Unmarshal([]byte(b.text), &v); err != nil {
			t.Errorf("README.md:%d: the YAML block does not parse: %v", b.line, err)
			continue
		}
		if !b.complete {
			continue
		}
		complete++
		path := filepath.Join(dir, fmt.Sprintf("line%d.yaml", b.line))
		if err := os.WriteFile(path, []byte(b.text), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := run([]string{"validate", "-c", path}, &stdout, &stderr); code != 0 {
			t.Errorf("README.md:%d: the config marked complete does not validate:\n%s", b.line, stderr.String())
		}
	}
	if yamls < 20 || complete < 2 {
		t.Errorf("found %d YAML blocks, %d marked complete; the reader of the README must have broken", yamls, complete)
	}
}

// TestREADMELinks: every link of the README to one of its sections leads
// to a heading or an anchor it has, and every link to a file of the
// repository to one that exists.
func TestREADMELinks(t *testing.T) {
	_, prose := readmeBlocks(t)
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} (.+)$`).FindAllStringSubmatch(prose, -1) {
		slug := headingSlug(m[1])
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	for _, m := range regexp.MustCompile(`<a id="([^"]+)"></a>`).FindAllStringSubmatch(prose, -1) {
		anchors[m[1]] = true
	}
	links := regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`).FindAllStringSubmatch(prose, -1)
	if len(links) < 30 {
		t.Fatalf("found %d links in the README; the reader of it must have broken", len(links))
	}
	for _, m := range links {
		target := m[1]
		switch {
		case strings.HasPrefix(target, "#"):
			if !anchors[target[1:]] {
				t.Errorf("README: the link %s leads to no heading or anchor", m[0])
			}
		case strings.Contains(target, "://"):
		default:
			file, _, _ := strings.Cut(target, "#")
			if _, err := os.Stat("../../" + file); err != nil {
				t.Errorf("README: the link %s: %v", m[0], err)
			}
		}
	}
}

// headingSlug is the anchor GitHub gives a heading: lower case, without
// the characters other than letters, digits, spaces, hyphens and
// underscores, spaces turned into hyphens.
func headingSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestREADMEReference: every key config/testdata/full.yaml sets (it sets
// every key there is) is in the README's reference, the block under
// "Every key and its default".
func TestREADMEReference(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n### Every key and its default\n")
	if !ok {
		t.Fatal(`the README has no "Every key and its default"`)
	}
	_, block, _ := strings.Cut(section, "```yaml\n")
	block, _, _ = strings.Cut(block, "```\n")
	full, err := os.ReadFile("../../config/testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	documented := keyPaths(t, "README.md's reference", block)
	// Keys the reference names in a comment, beside the other form of
	// their value or key it shows.
	for _, k := range []string{
		"admin.mode",                                             // with admin.address unix:...
		"routes[].respond.body_file",                             // or body
		"routes[].rewrite.regex", "routes[].rewrite.replacement", // or the replacement alone
	} {
		documented[k] = true
	}
	for k := range keyPaths(t, "config/testdata/full.yaml", string(full)) {
		// A name the author chose (an upstream's, a field's) is an
		// example, not a key; what is under it is.
		if !documented[k] && !strings.HasSuffix(k, "*") {
			t.Errorf("%s is in config/testdata/full.yaml, not in the README's reference", k)
		}
	}
}

// userKeyed are the mappings whose keys the config's author names (an
// upstream, a status, a header field): keyPaths writes their keys as *.
var userKeyed = map[string]bool{
	"upstreams": true, "errors": true, "routes[].errors": true, "routes[].respond.headers": true, "cache.stores": true,
	"routes[].headers.request.set": true, "routes[].headers.request.add": true,
	"routes[].headers.response.set": true, "routes[].headers.response.add": true,
}

// keyPaths returns the path of every key in a YAML document, list items
// written [] (routes[].upstream), the keys of userKeyed mappings *.
func keyPaths(t *testing.T, name, doc string) map[string]bool {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	paths := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			if n.Kind == yaml.SequenceNode {
				path += "[]"
			}
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				key := n.Content[i].Value
				if userKeyed[path] {
					key = "*"
				}
				p := key
				if path != "" {
					p = path + "." + key
				}
				paths[p] = true
				walk(n.Content[i+1], p)
			}
		}
	}
	walk(&root, "")
	if len(paths) < 100 {
		t.Fatalf("%s: %d keys; that is not the whole config", name, len(paths))
	}
	return paths
}
