// Command compare benchmarks sluice against nginx, HAProxy and Caddy on
// this machine and prints the results as a Markdown table.
//
//	go run ./bench/compare            # every proxy and scenario, 5 rounds × 3 s
//	go run ./bench/compare -quick     # 1 round × 2 s, a smoke test
//
// Each proxy gets one worker (GOMAXPROCS=1) pinned to CPU 0; wrk, the
// upstream (one nginx worker answering from memory) and this program
// are pinned to CPU 1. Every config and log goes into a temp dir that is
// removed on exit; every child runs in the foreground in its own process
// group and is killed on exit, on an error and on SIGINT/SIGTERM. See
// bench/README.md for what is measured and how to read the table.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// wantNoFile is the RLIMIT_NOFILE asked for; the hard limit may cap it.
const wantNoFile = 65536

// idleRounds caps the rounds of the idle-connections scenario.
const idleRounds = 3

// direct is the pseudo-proxy whose rows send wrk straight to the
// upstream: the ceiling that CPU 1 allows. The upstream speaks plain HTTP
// only, so it sits out the TLS scenarios.
var direct = proxy{name: "direct", noTLS: true}

type options struct {
	proxies   []string
	scenarios []string
	rounds    int
	duration  time.Duration
	warmup    time.Duration
	conns     int
	threads   int
	idleConns int
	h2Conns   int
	h2Streams int
	settle    time.Duration
	sluice    string
	sluiceB   string
	direct    bool
	keep      bool
	verbose   bool
	// cpuprofile is the directory sluice (not sluice-b) writes a CPU
	// profile into for each scenario it runs. "" for none.
	cpuprofile string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	proxiesFlag := fs.String("proxies", "sluice,nginx,haproxy,caddy,go-relay", "comma-separated `list` of proxies to compare")
	scenariosFlag := fs.String("scenarios", "small,16k,1m,post4k,close,logged,idle", "comma-separated `list` of scenarios")
	fs.IntVar(&o.rounds, "rounds", 5, "measured rounds per scenario (at most 3 for idle); the median is reported")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "length of one measured wrk run (whole seconds)")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured wrk run per proxy before each scenario")
	fs.IntVar(&o.conns, "connections", 64, "wrk connections")
	fs.IntVar(&o.threads, "threads", 1, "wrk threads (all on CPU 1)")
	fs.IntVar(&o.idleConns, "idle-conns", 10000, "connections opened in the idle scenarios")
	fs.IntVar(&o.h2Conns, "h2-conns", 16, "h2load's (bench/h3load's) connections (-c) in the HTTP/2 (HTTP/3) scenarios")
	fs.IntVar(&o.h2Streams, "h2-streams", 10, "h2load's (bench/h3load's) concurrent streams per connection (-m) in the HTTP/2 (HTTP/3) scenarios")
	fs.DurationVar(&o.settle, "idle-settle", 2*time.Second, "how long after the idle connections opened their RSS is read (Go forces a collection every 2 minutes: 130s leaves no handshake garbage in the Go proxies' heaps)")
	fs.StringVar(&o.sluice, "sluice", "", "sluice `binary` to test (default: build ./cmd/sluice into the temp dir)")
	fs.StringVar(&o.sluiceB, "sluice-b", "", "a second sluice `binary`, run as proxy sluice-b beside sluice: an A/B comparison of two builds")
	fs.BoolVar(&o.direct, "direct", true, "also run wrk straight against the upstream, as a ceiling")
	fs.BoolVar(&o.keep, "keep", false, "keep the temp dir (configs and logs) and print its path")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write sluice's CPU profile of each scenario it runs into `dir`, as <proxy>-<scenario>.pprof (go tool pprof reads them)")
	fs.BoolVar(&o.verbose, "v", false, "print wrk's own output to stderr")
	quick := fs.Bool("quick", false, "smoke test: 1 round of 2 s (unless -rounds or -duration are given)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["rounds"] {
			o.rounds = 1
		}
		if !set["duration"] {
			o.duration = 2 * time.Second
		}
	}
	list := splitList(*proxiesFlag)
	if o.sluiceB != "" && !slices.Contains(list, "sluice-b") {
		list = append(list, "sluice-b")
	}
	for _, name := range list {
		if _, ok := proxyByName(name); !ok {
			return o, fmt.Errorf("-proxies: unknown proxy %q (known: sluice, sluice-reuse, sluice-dial, sluice-b, sluice-disk, nginx, nginx-sendfile, haproxy, varnish, caddy, go-relay)", name)
		}
		o.proxies = append(o.proxies, name)
	}
	for _, name := range expandScenarios(splitList(*scenariosFlag)) {
		if _, ok := scenarioByName(name); !ok {
			var known []string
			for _, sc := range scenarios {
				known = append(known, sc.name)
			}
			return o, fmt.Errorf("-scenarios: unknown scenario %q (known: %s; groups: plain, tls, h2, h3, static, cache, all)", name, strings.Join(known, ", "))
		}
		o.scenarios = append(o.scenarios, name)
	}
	switch {
	case len(o.proxies) == 0:
		return o, errors.New("-proxies: empty")
	case len(o.scenarios) == 0:
		return o, errors.New("-scenarios: empty")
	case o.rounds < 1:
		return o, errors.New("-rounds must be at least 1")
	case o.duration < time.Second:
		return o, errors.New("-duration must be at least 1s")
	case o.warmup < 0:
		return o, errors.New("-warmup must not be negative")
	case o.conns < 1 || o.threads < 1 || o.threads > o.conns:
		return o, errors.New("-connections and -threads must be at least 1, threads <= connections")
	case o.idleConns < 1:
		return o, errors.New("-idle-conns must be at least 1")
	case o.h2Conns < 1 || o.h2Streams < 1:
		return o, errors.New("-h2-conns and -h2-streams must be at least 1")
	case o.settle < 0:
		return o, errors.New("-idle-settle must not be negative")
	case (o.sluiceB != "") != slices.Contains(o.proxies, "sluice-b"):
		return o, errors.New("-sluice-b and the proxy sluice-b go together: give both or neither")
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// bench is one run of the comparison.
type bench struct {
	opt      options
	dir      string            // temp dir holding every config, log and file
	procs    children          // every child started
	tools    map[string]string // executable paths: wrk, nginx, haproxy, caddy, sluice
	scripts  map[string]string // wrk script path by scenario name
	clk      float64           // clock ticks per second
	noFile   uint64            // RLIMIT_NOFILE in force
	upstream string            // host:port of the upstream nginx
	status   bool              // the upstream serves stub_status at statusPath
	targets  []proxy           // what is measured, direct included
	built    string            // where the sluice binary came from
	tls      *tlsFiles         // the certificate of the TLS scenarios; nil without them
	notes    []string          // caveats the report must state
	watchdog *exec.Cmd         // cleans up should this program be killed
	cleaned  sync.Once
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	opt, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 2
	}
	if opt.cpuprofile != "" {
		// sluice runs elsewhere than here: the path must not be relative.
		if opt.cpuprofile, err = filepath.Abs(opt.cpuprofile); err == nil {
			err = os.MkdirAll(opt.cpuprofile, 0o755)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "compare: -cpuprofile:", err)
			return 1
		}
	}
	b := &bench{opt: opt, tools: map[string]string{}, scripts: map[string]string{}}
	if !b.findTools() {
		return 1
	}
	b.dir, err = os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	defer b.cleanup()
	// nginx workers run as an unprivileged user when started by root:
	// they must be able to read the static files.
	os.Chmod(b.dir, 0o755)
	b.procs.pgids = filepath.Join(b.dir, "pgids")
	if b.watchdog, err = startWatchdog(b.dir, !opt.keep); err != nil {
		fmt.Fprintln(os.Stderr, "compare: watchdog:", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "\ncompare: %v: stopping every child and removing %s\n", s, b.dir)
		b.cleanup()
		os.Exit(130)
	}()
	if err := b.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	env := b.environment()
	started := time.Now()
	var loads []loadRow
	var idles []idleRow
	for _, name := range opt.scenarios {
		sc, _ := scenarioByName(name)
		if sc.idle {
			idles = append(idles, b.idleScenario(sc)...)
		} else {
			loads = append(loads, b.loadScenario(sc)...)
		}
	}
	env.elapsed = time.Since(started)
	env.loadEnd = loadAvg()
	b.report(os.Stdout, env, loads, idles)
	return 0
}

// cleanup kills every child and removes the temp dir, once.
func (b *bench) cleanup() {
	b.cleaned.Do(func() {
		b.procs.stopAll()
		if b.watchdog != nil {
			b.watchdog.Process.Kill()
		}
		if b.dir == "" {
			return
		}
		if b.opt.keep {
			fmt.Fprintln(os.Stderr, "compare: kept", b.dir)
			return
		}
		os.RemoveAll(b.dir)
	})
}

// findTools looks up the programs the comparison runs and says which
// are missing. A missing proxy is skipped; a missing wrk, taskset or
// nginx (which is also the upstream) ends the run.
func (b *bench) findTools() bool {
	type need struct{ tool, pkg string }
	needs := []need{{"wrk", "wrk"}, {"taskset", "util-linux"}, {"nginx", "nginx"}}
	for _, name := range b.opt.proxies {
		if p, _ := proxyByName(name); p.tool != "" && p.tool != "nginx" {
			needs = append(needs, need{p.tool, p.pkg})
		}
	}
	builtHere := func(name string) bool {
		return name == "go-relay" || b.opt.sluice == "" && isSluice(name) && name != "sluice-b"
	}
	if slices.ContainsFunc(b.opt.proxies, builtHere) || b.wants(func(sc scenario) bool { return sc.handshakes || sc.h3 }) {
		needs = append(needs, need{"go", "golang-go"})
	}
	if b.wants(func(sc scenario) bool { return sc.tls && !sc.handshakes && !sc.multiplexed() }) {
		needs = append(needs, need{"openssl", "openssl"})
	}
	if b.wants(func(sc scenario) bool { return sc.h2 }) {
		needs = append(needs, need{"h2load", "nghttp2-client"})
	}
	var missing, pkgs []string
	fatal := false
	for _, n := range needs {
		path, err := exec.LookPath(n.tool)
		if err == nil {
			b.tools[n.tool] = path
			continue
		}
		missing = append(missing, n.tool)
		pkgs = append(pkgs, n.pkg)
		switch n.tool {
		case "wrk", "taskset", "nginx":
			fatal = true
		case "go":
			b.note("sluice (unless -sluice is given), go-relay, bench/tlsload (the load of tls-close and tls-resume) and bench/h3load (of h3-small) skipped: no `go` to build them with")
		case "openssl":
			b.note("what each proxy negotiates with wrk's OpenSSL is not checked: no `openssl`")
		case "h2load":
			b.note("the HTTP/2 scenarios are not measured: no `h2load`")
		default:
			b.note(n.tool + " skipped: not installed")
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "compare: missing: %s\n  install with: apt-get install -y %s\n",
			strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
	if fatal {
		fmt.Fprintln(os.Stderr, "compare: wrk, taskset and nginx (the upstream) are required; stopping")
		return false
	}
	return true
}

// wants reports whether a scenario the run is to measure is in.
func (b *bench) wants(in func(scenario) bool) bool {
	for _, name := range b.opt.scenarios {
		if sc, ok := scenarioByName(name); ok && in(sc) {
			return true
		}
	}
	return false
}

func (b *bench) note(s string) {
	b.notes = append(b.notes, s)
	fmt.Fprintln(os.Stderr, "compare: note:", s)
}

// setup pins this program, raises the file limit, builds sluice,
// writes the wrk scripts and starts the upstream.
func (b *bench) setup() error {
	// This program (the idle-connection opener) belongs with the load.
	if out, err := exec.Command("taskset", "-a", "-c", "-p", loadCPU, strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
		b.note(fmt.Sprintf("could not pin the benchmark itself to CPU %s: %v %s", loadCPU, err, out))
	}
	if n := numCPU(); n < 2 {
		b.note(fmt.Sprintf("this machine has %d CPU: the proxy and the load share it", n))
	}
	b.clk = clockTicks()
	var err error
	b.noFile, err = raiseNoFile(wantNoFile)
	if err != nil {
		return fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if b.noFile < wantNoFile {
		b.note(fmt.Sprintf("RLIMIT_NOFILE could not be raised to %d: every process runs with %d, the hard limit", wantNoFile, b.noFile))
	}
	if t := keepIdle(b.opt.settle); t > 0 && b.wants(func(sc scenario) bool { return sc.idle }) {
		b.note(fmt.Sprintf("in the idle scenarios every proxy closes client connections idle for %s, not its own default, so that they outlive -idle-settle %s", t, b.opt.settle))
	}
	if need := uint64(b.opt.idleConns) + 1000; b.wants(func(sc scenario) bool { return sc.idle }) && b.noFile < need {
		b.opt.idleConns = int(b.noFile) - 1000
		b.note(fmt.Sprintf("idle scenario lowered to %d connections to fit RLIMIT_NOFILE %d", b.opt.idleConns, b.noFile))
	}
	for _, sc := range scenarios {
		if sc.idle || sc.handshakes || sc.multiplexed() {
			continue
		}
		if b.scripts[sc.name], err = writeWrkScript(b.dir, sc); err != nil {
			return err
		}
	}
	if b.wants(func(sc scenario) bool { return sc.tls }) {
		if b.tls, err = makeTLSFiles(filepath.Join(b.dir, "tls")); err != nil {
			return fmt.Errorf("making the TLS certificate: %w", err)
		}
	}
	if b.wants(func(sc scenario) bool { return sc.handshakes }) {
		if path, err := b.build("tlsload", "bench/tlsload"); err != nil {
			b.note("tls-close and tls-resume not measured: " + firstLine(err.Error()))
		} else {
			b.tools["tlsload"] = path
		}
	}
	if b.wants(func(sc scenario) bool { return sc.h3 }) {
		if path, err := b.build("h3load", "bench/h3load"); err != nil {
			b.note("the HTTP/3 scenarios are not measured: " + firstLine(err.Error()))
		} else {
			b.tools["h3load"] = path
		}
	}
	for _, name := range b.opt.proxies {
		p, _ := proxyByName(name)
		switch {
		case name == "sluice-b":
			path, err := givenBinary(b.opt.sluiceB)
			if err != nil {
				b.note("sluice-b skipped: " + err.Error())
				continue
			}
			b.tools["sluice-b"] = path
		case isSluice(name):
			if err := b.sluiceBinary(); err != nil {
				b.note("sluice skipped: " + err.Error())
				continue
			}
		case name == "go-relay":
			path, err := b.build("go-relay", "bench/relay")
			if err != nil {
				b.note("go-relay skipped: " + err.Error())
				continue
			}
			b.tools["go-relay"] = path
		case b.tools[p.tool] == "":
			continue
		}
		b.targets = append(b.targets, p)
	}
	if b.opt.direct {
		b.targets = append(b.targets, direct)
	}
	return b.startUpstream()
}

// sluiceBinary uses -sluice or builds ./cmd/sluice into the temp dir.
func (b *bench) sluiceBinary() error {
	if b.tools["sluice"] != "" {
		return nil // built for another sluice variant
	}
	if b.opt.sluice != "" {
		path, err := givenBinary(b.opt.sluice)
		b.tools["sluice"] = path
		return err
	}
	path, err := b.build("sluice", "cmd/sluice")
	if err != nil {
		return err
	}
	b.tools["sluice"] = path
	b.built = "built by this run from the work tree"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		b.built += " at commit " + strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			b.built += fmt.Sprintf(", plus uncommitted changes to %d tracked file(s)", strings.Count(string(st), "\n"))
		}
	}
	return nil
}

// givenBinary is the absolute path of a binary named on the command line.
func givenBinary(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(path)
}

// build builds the module's package dir (such as cmd/sluice) into the temp
// dir as name.
func (b *bench) build(name, dir string) (string, error) {
	if b.tools["go"] == "" {
		return "", errors.New("no go toolchain")
	}
	path := filepath.Join(b.dir, name)
	fmt.Fprintf(os.Stderr, "compare: building ./%s\n", dir)
	out, err := exec.Command(b.tools["go"], "build", "-o", path, "github.com/sluice-proxy/sluice/"+dir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./%s: %v\n%s", dir, err, out)
	}
	return path, nil
}

func (b *bench) startUpstream() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(b.dir, "upstream")
	b.status = hasStubStatus(b.tools["nginx"])
	if !b.status {
		b.note("nginx has no stub_status module (`nginx -V` lacks with-http_stub_status_module): upstream connections are not counted, their column shows ?")
	}
	argv, err := upstreamConfig(b.tools["nginx"], dir, port, b.noFile, b.status)
	if err != nil {
		return err
	}
	c, err := b.procs.start("upstream", filepath.Join(dir, "output.log"), nil, argv...)
	if err != nil {
		return err
	}
	if err := waitReady(c, port, nil); err != nil {
		return fmt.Errorf("upstream nginx: %w", err)
	}
	b.upstream = fmt.Sprintf("127.0.0.1:%d", port)
	if b.status {
		if _, err := readStubStatus(b.upstream); err != nil {
			b.status = false
			b.note(fmt.Sprintf("the upstream's %s does not answer (%v): upstream connections are not counted, their column shows ?", statusPath, err))
		}
	}
	return nil
}

// startProxy writes p's config for scenario sc into a fresh directory
// named for p and tag and starts it on a free port, then checks that it
// proxies every path correctly. In a scenario with logs, the proxy writes
// its access log to a file in that directory; in a TLS scenario it serves
// TLS with the run's certificate.
func (b *bench) startProxy(p proxy, sc scenario, tag string) (*child, int, error) {
	port, err := freePort()
	if err != nil {
		return nil, 0, err
	}
	dir := filepath.Join(b.dir, p.name+"-"+tag)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, err
	}
	bin := b.tools[p.tool]
	switch {
	case p.name == "sluice-b", p.name == "go-relay":
		bin = b.tools[p.name]
	case isSluice(p.name):
		bin = b.tools["sluice"]
	}
	s := site{dir: dir, port: port, upstream: b.upstream, noFile: b.noFile, idleConns: b.opt.idleConns, binary: bin}
	if sc.logged {
		s.accessLog = filepath.Join(dir, "access.log")
	}
	var check *tls.Config
	if sc.tls {
		s.tls, check = b.tls, b.tls.clientTLS()
	}
	s.h2, s.h3 = sc.h2, sc.h3
	if sc.idle {
		s.idleTimeout = keepIdle(b.opt.settle)
	}
	if sc.static {
		s.static = filepath.Join(b.dir, "upstream", "www", "static")
	}
	s.cache = sc.cache
	if b.opt.cpuprofile != "" && isSluice(p.name) && p.name != "sluice-b" {
		s.cpuprofile = filepath.Join(b.opt.cpuprofile, p.name+"-"+tag+".pprof")
	}
	argv, env, err := p.configure(s)
	if err != nil {
		return nil, 0, err
	}
	c, err := b.procs.start(p.name, filepath.Join(dir, "output.log"), env, argv...)
	if err != nil {
		return nil, 0, err
	}
	if err := waitReady(c, port, check); err != nil {
		c.stop()
		return nil, 0, err
	}
	return c, port, nil
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitReady waits for c to accept connections on port and checks that
// every path of every scenario answers 200 with the right body length;
// with cfg, over TLS, the certificate verified against the run's CA.
func waitReady(c *child, port int, cfg *tls.Config) error {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if !c.alive() {
			return fmt.Errorf("%s exited (%v):\n%s", c.name, c.err, c.logTail())
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not accept connections on %s: %v\n%s", c.name, addr, err, c.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: cfg}}
	scheme := "http"
	if cfg != nil {
		scheme = "https"
	}
	checks := []struct {
		method, path string
		body         string
		size         int
	}{
		{"GET", "/small", "", len(smallBody)},
		{"GET", "/16k", "", size16k},
		{"GET", "/1m", "", size1m},
		{"POST", "/post", strings.Repeat("x", 4096), len(postBody)},
		{"GET", "/cached/small", "", len(smallBody)},
		{"GET", "/cached/1m", "", size1m},
	}
	for _, ck := range checks {
		req, _ := http.NewRequest(ck.method, scheme+"://"+addr+ck.path, strings.NewReader(ck.body))
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %s %s: %w\n%s", c.name, ck.method, ck.path, err, c.logTail())
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || n != int64(ck.size) {
			return fmt.Errorf("%s: %s %s: status %d, %d body bytes (want 200, %d), %v", c.name, ck.method, ck.path, resp.StatusCode, n, ck.size, err)
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
