package config

import (
	"fmt"
	"strings"
)

// A Problem is one thing wrong with a config file.
type Problem struct {
	// File is the name given to Parse or Load.
	File string
	// Line and Column locate the problem in the file; both are 1-based.
	// Line 0 means the problem concerns the file as a whole (it is
	// empty, for instance), and then Column is 0 too.
	Line, Column int
	// Path is the key path of the offending value, such as
	// "upstreams.api.retry.tries" or "listen[0].address"; it is empty
	// when the problem is not about one key (a YAML syntax error).
	Path string
	// Msg says what is wrong and, where it can, how to fix it.
	Msg string
}

// String formats p as "file:line:col: path: msg", leaving out the
// position when Line is 0 and the path when Path is empty.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
		if p.Column > 0 {
			fmt.Fprintf(&b, ":%d", p.Column)
		}
	}
	b.WriteString(": ")
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error is the error returned by Parse and Load when a config file is
// invalid. It lists every problem found, not just the first, ordered by
// position in the file. Problems is never empty.
type Error struct {
	Problems []Problem
}

// Error returns the problems one per line, without a trailing newline.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}
