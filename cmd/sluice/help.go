package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one of sluice's commands, as help describes it.
type command struct {
	name, summary string
	// flags writes the command's flags as flag.PrintDefaults does, from
	// the flag set the command itself parses, so that help never misses
	// one; nil for a command without flags.
	flags func(w io.Writer)
}

// commands are sluice's commands, in the order help lists them.
var commands = []command{
	{"run", "serve as the config file says (SIGHUP reloads it, SIGUSR1 reopens the access log, SIGUSR2 upgrades the binary)",
		func(w io.Writer) { parseFlags("run", []string{"-h"}, w) }},
	{"validate", "check a config file: exit 1 with every problem, its line and column",
		func(w io.Writer) { parseFlags("validate", []string{"-h"}, w) }},
	{"reload", "check the config file, then make the sluice run of its pid_file reload it (SIGHUP)",
		func(w io.Writer) { parseFlags("reload", []string{"-h"}, w) }},
	{"upgrade", "make the sluice run of the config file's pid_file start the binary at its path on its sockets, and drain once that serves (SIGUSR2)",
		func(w io.Writer) { parseFlags("upgrade", []string{"-h"}, w) }},
	{"demo", "run a proxy, with its status page, in front of two built-in upstreams, one that drops kept-alive connections",
		func(w io.Writer) {
			fs, _, _ := demoFlags(w)
			fs.PrintDefaults()
		}},
	{"version", "print the version, the commit and time it was built from, and the Go version", nil},
	{"help", "print this help; help COMMAND (or COMMAND -h) prints one command's", nil},
}

// usage writes every command with its flags.
func usage(w io.Writer) {
	fmt.Fprint(w, "sluice is a reverse proxy whose retries are right.\n\nusage: sluice COMMAND [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
		if f := flagText(c); f != "" {
			fmt.Fprint(w, indent(f, "    "))
		}
	}
}

// commandHelp writes one command's help to stdout: its summary and flags.
func commandHelp(name string, stdout, stderr io.Writer) int {
	for _, c := range commands {
		if c.name != name {
			continue
		}
		if name == "help" {
			usage(stdout)
			return 0
		}
		fmt.Fprintf(stdout, "usage: sluice %s [flags]\n\n%s\n", name, c.summary)
		if f := flagText(c); f != "" {
			fmt.Fprintf(stdout, "\nflags:\n%s", f)
		} else {
			fmt.Fprint(stdout, "\nno flags\n")
		}
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n", name)
	usage(stderr)
	return 2
}

// flagText is c's flags as flag.PrintDefaults writes them, without the
// "Usage of" line a flag set's -h writes first.
func flagText(c command) string {
	if c.flags == nil {
		return ""
	}
	var b bytes.Buffer
	c.flags(&b)
	s := b.String()
	if strings.HasPrefix(s, "Usage") {
		_, s, _ = strings.Cut(s, "\n")
	}
	return s
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString(prefix)
		b.WriteString(line)
	}
	return b.String()
}

// wantsHelp reports whether a command's arguments ask for help (-h,
// -help, --h or --help, as package flag reads them), before any "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--h", "--help":
			return true
		}
	}
	return false
}

// noFlags parses the arguments of a command that takes none.
func noFlags(name string, args []string, stderr io.Writer) bool {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice %s: unexpected argument %q\n", name, fs.Arg(0))
		return false
	}
	return true
}
