// Command sluice is a reverse proxy whose retries are right: it retries
// every request that can safely be retried, and never sends a request twice
// unless that is safe.
//
//	sluice run -c sluice.yaml       serve as the file says
//	sluice validate -c sluice.yaml  check the file; exit 1 with every problem
//	sluice reload -c sluice.yaml    make the running sluice reload the file
//	sluice upgrade -c sluice.yaml   replace the running sluice by the binary on disk
//	sluice demo                     a proxy and built-in upstreams to try
//	sluice version                  the version, commit, build time and Go version
//	sluice help                     every command and its flags (COMMAND -h: one)
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/internal/sock"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/upgrade"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if wantsHelp(args[1:]) {
		// sluice COMMAND -h: the command's flags, on stdout, exit 0.
		return commandHelp(args[0], stdout, stderr)
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stderr)
	case "validate":
		return cmdValidate(args[1:], stdout, stderr)
	case "demo":
		return cmdDemo(args[1:], stdout, stderr)
	case "reload":
		return cmdSignal("reload", reloadSignal, args[1:], stdout, stderr)
	case "upgrade":
		return cmdSignal("upgrade", upgradeSignal, args[1:], stdout, stderr)
	case "version":
		return cmdVersion(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return commandHelp(args[1], stdout, stderr)
		}
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

type flags struct {
	config     string
	cpuprofile string
}

func parseFlags(name string, args []string, stderr io.Writer) (flags, bool) {
	var f flags
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "c", "sluice.yaml", "config `file`")
	if name == "run" {
		fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile to `file` until exit")
	}
	if err := fs.Parse(args); err != nil {
		return f, false
	}
	return f, true
}

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	f, ok := parseFlags("validate", args, stderr)
	if !ok {
		return 2
	}
	path := f.config
	cfg, err := config.Load(path)
	if err == nil {
		_, err = config.Build(cfg)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stderr, "warning:", w)
	}
	fmt.Fprintf(stdout, "%s: ok (%s, %s, %s)\n", path, count(len(cfg.Listen), "listener"), count(len(cfg.Routes), "route"), count(len(cfg.Upstreams), "upstream"))
	return 0
}

// count says n things: "1 route", "2 routes", "0 routes".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func cmdRun(args []string, stderr io.Writer) int {
	f, ok := parseFlags("run", args, stderr)
	if !ok {
		return 2
	}
	path := f.config
	if f.cpuprofile != "" {
		out, err := os.Create(f.cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		pprof.StartCPUProfile(out)
		defer func() {
			pprof.StopCPUProfile()
			out.Close()
		}()
	}
	cfg, hash, err := loadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	loadedAt := time.Now()
	log := newLog(stderr, cfg)
	slog.SetDefault(log)
	logWarnings(log, cfg)
	logDescriptorLimit(log, cfg)
	// The sockets handed over by the process this one replaces, when a
	// binary upgrade started it (package upgrade).
	in, err := upgrade.Inherit()
	if err != nil {
		log.Error("starting", "error", err)
		return 1
	}
	r, err := start(path, cfg, loaded{hash, loadedAt}, stderr, log, in)
	in.Close() // the sockets the config no longer lists; the pipe on failure
	if err != nil {
		log.Error("starting", "error", err)
		return 1
	}
	return r.serve()
}

// loadConfig reads and parses the config file at path, and returns it
// with the SHA-256 of the file's bytes, which names the config running in
// the admin API and the metrics.
func loadConfig(path string) (*config.Config, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	cfg, err := config.Parse(path, data)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(data)
	return cfg, hex.EncodeToString(sum[:]), nil
}

// logWarnings logs what the config file most likely did not mean.
func logWarnings(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		log.Warn("config", "warning", w.String())
	}
}

// logAdmin logs where the admin listener serves.
func logAdmin(log *slog.Logger, bound net.Addr, c config.Admin) {
	addr, status := addrString(bound), "http://"+bound.String()+"/status"
	if ua, ok := bound.(*net.UnixAddr); ok {
		status = "curl --unix-socket " + ua.Name + " http://localhost/status"
	}
	log.Info("admin", "address", addr, "status", status, "pprof", c.Pprof, "token", c.TokenFile != "")
}

// addrString names a bound address as the config spells it: host:port, or
// unix:PATH for a Unix socket.
func addrString(a net.Addr) string {
	if ua, ok := a.(*net.UnixAddr); ok {
		return sock.UnixPrefix + ua.Name
	}
	return a.String()
}

// logCertificates logs the certificates read from the files of each TLS
// listener of gen: the file, the names and when it expires; a warning for
// one expired or not yet valid. (The ACME managers log theirs as they
// come.)
func logCertificates(log *slog.Logger, gen *config.Generation) {
	now := time.Now()
	for i, cs := range gen.Files {
		if cs == nil {
			continue
		}
		l := gen.Config.Listen[i]
		for j, c := range cs.List() {
			level, msg := slog.LevelInfo, "certificate"
			switch {
			case now.After(c.Leaf.NotAfter):
				level, msg = slog.LevelWarn, "certificate expired"
			case now.Before(c.Leaf.NotBefore):
				level, msg = slog.LevelWarn, "certificate not yet valid"
			}
			log.Log(context.Background(), level, msg, "listen", l.Address, "file", l.TLS.Certificates[j].Cert,
				"names", c.Leaf.DNSNames, "not_after", c.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
	}
}

// serve runs srv on lns until SIGINT or SIGTERM, then drains: no new
// connections, in-flight requests get up to drain to finish. SIGHUP calls
// reload and SIGUSR1 reopen, when there are.
func serve(srv *proxy.Server, lns []net.Listener, opts []proxy.ListenerOptions, drain time.Duration, log *slog.Logger, reload, reopen func()) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, append([]os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}, reopenSignals...)...)
	defer signal.Stop(sig)

	var wg sync.WaitGroup
	failed := make(chan error, len(lns))
	for i, ln := range lns {
		var o proxy.ListenerOptions
		if i < len(opts) {
			o = opts[i]
		}
		attrs := []any{"address", ln.Addr().String()}
		if o.TLS != nil {
			attrs = append(attrs, "tls", true)
		}
		if len(o.Protocols) > 0 {
			attrs = append(attrs, "protocols", o.Protocols)
		}
		if rd, ok := o.Handler.(*proxy.RedirectHTTPS); ok {
			attrs = append(attrs, "redirect_https_port", rd.Port)
		}
		log.Info("listening", attrs...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.ServeWith(ln, o); err != nil && !errors.Is(err, proxy.ErrServerClosed) {
				failed <- err
			}
		}()
	}
	code := 0
wait:
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGHUP {
				if reload != nil {
					reload()
				}
				continue
			}
			if slices.Contains(reopenSignals, s) {
				if reopen != nil {
					reopen()
				}
				continue
			}
			log.Info("shutting down", "signal", s.String(), "drain", drain)
			break wait
		case err := <-failed:
			log.Error("serving", "error", err)
			code = 1
			break wait
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("drain timeout passed; remaining connections closed", "error", err)
	}
	wg.Wait()
	log.Info("stopped")
	return code
}
