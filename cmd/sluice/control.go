package main

import (
	"fmt"
	"io"
	"os"

	"github.com/sluice-proxy/sluice/config"
)

// cmdSignal is sluice reload and sluice upgrade: it checks the config
// file, reads the pid file it names, and sends sig to the process there,
// which reloads the file (SIGHUP) or starts the executable at its path
// again on its sockets (SIGUSR2). A file with problems is not sent: they
// are printed, and the exit code is 1, as sluice validate does; the
// running process is left alone.
func cmdSignal(name string, sig os.Signal, args []string, stdout, stderr io.Writer) int {
	f, ok := parseFlags(name, args, stderr)
	if !ok {
		return 2
	}
	if sig == nil {
		fmt.Fprintf(stderr, "sluice %s: not supported on this system\n", name)
		return 1
	}
	cfg, err := config.Load(f.config)
	if err == nil {
		_, err = config.Build(cfg)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		fmt.Fprintf(stderr, "sluice %s: nothing sent; the running process is unchanged\n", name)
		return 1
	}
	if cfg.PIDFile == "" {
		fmt.Fprintf(stderr, "sluice %s: %s has no pid_file; send %v to the process yourself\n", name, f.config, sig)
		return 1
	}
	pid, err := readPIDFile(cfg.PIDFile)
	if err != nil {
		fmt.Fprintf(stderr, "sluice %s: %v\n", name, err)
		return 1
	}
	if err := signalProcess(pid, sig); err != nil {
		fmt.Fprintf(stderr, "sluice %s: process %d (from %s): %v\n", name, pid, cfg.PIDFile, err)
		return 1
	}
	fmt.Fprintf(stdout, "sluice %s: sent %v to process %d; its log says how it went\n", name, sig, pid)
	return 0
}
