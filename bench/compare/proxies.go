package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// proxyCPU and loadCPU are the CPUs the proxy under test and the rest
// (wrk, the upstream, this program) are pinned to.
const (
	proxyCPU = "0"
	loadCPU  = "1"
)

// site is what a proxy's config needs to know: where to write its
// files, where to listen and where to send requests.
type site struct {
	dir       string // the proxy's own directory in the temp dir
	port      int    // to listen on, on 127.0.0.1
	upstream  string // host:port of the upstream
	noFile    uint64 // RLIMIT_NOFILE the proxy runs with
	idleConns int    // idle client connections it must be able to hold
	binary    string // the proxy's executable
	accessLog string // the file to write the access log to; "" for none
	// tls is the certificate to serve TLS 1.3 with, on the proxy's one
	// listener; nil for plain HTTP.
	tls *tlsFiles
	// h2 makes the TLS listener offer HTTP/2 by ALPN, h2 before
	// http/1.1. Caddy and sluice do in every TLS scenario, by default;
	// nginx and HAProxy only when asked, so only in the HTTP/2 scenarios,
	// which leaves the TLS scenarios' configs as they were.
	h2 bool
	// h3 makes the proxy serve HTTP/3 too, on a UDP socket at the TLS
	// listener's port (sluice and Caddy; the others sit out).
	h3 bool
	// idleTimeout is how long a client keep-alive connection may idle
	// before the proxy closes it; 0 for the proxy's own (60 s for sluice
	// and as HAProxy is set, 75 s for nginx, 5 minutes for Caddy).
	idleTimeout time.Duration
	// static is the directory the proxy serves /static/ from itself, in
	// the static scenarios; "" for none.
	static string
	// cache has the proxy cache the upstream's responses (the cache
	// scenarios): in memory where it can (sluice's memory store,
	// HAProxy's cache, Varnish's malloc storage), in files for nginx, in
	// 256 MiB.
	cache bool
	// cpuprofile is where sluice writes its CPU profile until it exits;
	// "" for none (the other proxies ignore it).
	cpuprofile string
}

// keepIdle is the idle timeout that keeps the idle scenarios'
// connections open until their RSS is read settle after they opened:
// 0, each proxy's own, when that is long enough.
func keepIdle(settle time.Duration) time.Duration {
	if settle+30*time.Second <= time.Minute {
		return 0
	}
	return (settle + time.Minute).Round(time.Second)
}

// seconds formats d for a config file, in whole seconds.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
}

// proxy is one reverse proxy under test.
type proxy struct {
	name    string
	tool    string   // executable looked up in PATH ("" for sluice, which is built)
	pkg     string   // Debian package that provides tool
	version []string // arguments that make tool print its version
	// configure writes the proxy's config files into s.dir and returns
	// the command that runs it in the foreground and the environment it
	// needs on top of this program's.
	configure func(s site) (argv, env []string, err error)
	// notIn lists scenarios the proxy sits out; onlyIn, when not empty,
	// the only ones it runs in.
	notIn, onlyIn []string
	// noTLS makes the proxy sit out the TLS scenarios.
	noTLS bool
	// noH3 makes the proxy sit out the HTTP/3 scenarios.
	noH3 bool
}

var proxies = []proxy{
	{name: "sluice", version: []string{"version"}, configure: sluiceConfig},
	// sluice takes the pooled connection for a POST without an
	// Idempotency-Key only once the upstream has earned it
	// (non_idempotent: learn); sluice-reuse always does (idle up to 1s),
	// as the other proxies do, and sluice-dial never does, the way no
	// upstream recycling its workers can turn into a 502 (see the
	// README).
	{name: "sluice-reuse", version: []string{"version"}, configure: sluiceModeConfig("reuse")},
	{name: "sluice-dial", version: []string{"version"}, configure: sluiceModeConfig("dial")},
	// sluice-b is the binary given with -sluice-b, configured as sluice:
	// two builds side by side, round by round.
	{name: "sluice-b", version: []string{"version"}, configure: sluiceConfig},
	// sluice-disk caches in a disk store: hits are sent from their files
	// by sendfile(2).
	{name: "sluice-disk", version: []string{"version"}, configure: sluiceDiskConfig,
		onlyIn: []string{"cache-small", "cache-1m"}},
	// Debian's nginx (1.22) and HAProxy (2.6) are built without QUIC.
	{name: "nginx", tool: "nginx", pkg: "nginx", version: []string{"-v"}, configure: nginxConfig, noH3: true},
	// nginx-sendfile is nginx with sendfile on: its proxy_cache serves
	// hits from files, by sendfile(2) with it (off by default).
	{name: "nginx-sendfile", tool: "nginx", pkg: "nginx", version: []string{"-v"}, configure: nginxSendfileConfig,
		onlyIn: []string{"cache-small", "cache-1m"}},
	// Varnish caches and nothing else here: it runs in the cache
	// scenarios alone.
	{name: "varnish", tool: "varnishd", pkg: "varnish", version: []string{"-V"}, configure: varnishConfig,
		onlyIn: []string{"cache-small", "cache-1m"}},
	// HAProxy logs to syslog, not to a file: it sits out the access log
	// scenario.
	{name: "haproxy", tool: "haproxy", pkg: "haproxy", version: []string{"-v"}, configure: haproxyConfig, notIn: []string{"logged", "static-small", "static-1m"}, noH3: true},
	{name: "caddy", tool: "caddy", pkg: "caddy", version: []string{"version"}, configure: caddyConfig, notIn: []string{"static-small", "static-1m", "cache-small", "cache-1m"}},
	// go-relay (bench/relay) is the least a Go proxy does per request: a
	// goroutine per connection, Go's netpoller, pooled upstream
	// connections, nothing else (over TLS, crypto/tls as it comes, and
	// HTTP/2 on x/net's Framer and HPACK with a goroutine per stream). It
	// shows what the runtime costs apart from sluice's own work. It holds
	// 68 KiB of buffers per connection, so it sits out the idle
	// scenarios, and it writes no access log.
	{name: "go-relay", configure: relayConfig, notIn: []string{"idle", "tls-idle", "logged", "static-small", "static-1m", "cache-small", "cache-1m"}, noH3: true},
}

// sitsOutWhy says why p is left out of scenario sc; "" when it is not.
func (p proxy) sitsOutWhy(sc scenario) string {
	if slices.Contains(p.notIn, sc.name) || sc.tls && p.noTLS || len(p.onlyIn) > 0 && !slices.Contains(p.onlyIn, sc.name) {
		return "sits out this scenario"
	}
	if sc.h3 && p.noH3 {
		return "serves no HTTP/3"
	}
	return ""
}

// sitsOut reports whether p is left out of scenario sc.
func (p proxy) sitsOut(sc scenario) bool { return p.sitsOutWhy(sc) != "" }

// isSluice reports whether a proxy is sluice, in any configuration or build.
func isSluice(name string) bool { return strings.HasPrefix(name, "sluice") }

func proxyByName(name string) (proxy, bool) {
	for _, p := range proxies {
		if p.name == name {
			return p, true
		}
	}
	return proxy{}, false
}

func writeFile(path, text string) error {
	return os.WriteFile(path, []byte(text), 0o644)
}

// pinned runs argv on the proxy's CPU.
func pinned(cpu string, argv ...string) []string {
	return append([]string{"taskset", "-c", cpu}, argv...)
}

func sluiceConfig(s site) ([]string, []string, error) { return sluiceWith(s, "", "") }

// sluiceDiskConfig caches in a disk store of 256 MiB.
func sluiceDiskConfig(s site) ([]string, []string, error) {
	return sluiceWith(s, "", fmt.Sprintf("cache:\n  stores:\n    default: {disk: {path: %q, size: 256MiB}}\n", filepath.Join(s.dir, "cache")))
}

func relayConfig(s site) ([]string, []string, error) {
	argv := []string{s.binary, "-listen", fmt.Sprintf("127.0.0.1:%d", s.port), "-upstream", s.upstream}
	if s.tls != nil {
		argv = append(argv, "-cert", s.tls.cert, "-key", s.tls.key)
	}
	return pinned(proxyCPU, argv...), []string{"GOMAXPROCS=1"}, nil
}

func sluiceModeConfig(mode string) func(s site) ([]string, []string, error) {
	return func(s site) ([]string, []string, error) {
		return sluiceWith(s, ", non_idempotent: "+mode, "")
	}
}

func sluiceWith(s site, pool, stores string) ([]string, []string, error) {
	// With a log, sluice's defaults: text, 64 KiB batches.
	accessLog := "{enabled: false}"
	if s.accessLog != "" {
		accessLog = fmt.Sprintf("{path: %q}", s.accessLog)
	}
	// Over TLS, TLS 1.3 only; the cipher suite is crypto/tls's choice
	// (AES-128-GCM where both ends have AES instructions), not settable.
	tlsConf := ""
	if s.tls != nil {
		tlsConf = fmt.Sprintf("    tls: {min_version: 1.3, certificates: [{cert: %q, key: %q}]}\n", s.tls.cert, s.tls.key)
	}
	// h2 first is sluice's default on a TLS listener; the HTTP/2
	// scenarios write it out, so that the config says what is measured.
	switch {
	case s.tls != nil && s.h3:
		tlsConf += "    protocols: [h3, h2, http/1.1]\n"
	case s.tls != nil && s.h2:
		tlsConf += "    protocols: [h2, http/1.1]\n"
	}
	timeouts := ""
	if s.idleTimeout > 0 {
		timeouts = "timeouts: {idle: " + seconds(s.idleTimeout) + "}\n"
	}
	static := ""
	if s.static != "" {
		static = fmt.Sprintf("  - {path_prefix: /static/, static: {root: %q}}\n", s.static)
	}
	// The cache scenarios: the default store, 256 MiB in memory.
	routeCache := ""
	if s.cache {
		routeCache = "\n    cache: {}"
	}
	cfg := filepath.Join(s.dir, "sluice.yaml")
	err := writeFile(cfg, fmt.Sprintf(`listen:
  - address: 127.0.0.1:%d
%s%saccess_log: %s
log: {level: error}
routes:
%s  - upstream: app%s
%supstreams:
  app:
    servers:
      - address: %s
    pool: {max_idle: 256, idle_timeout: 60s%s}
`, s.port, tlsConf, timeouts, accessLog, static, routeCache, stores, s.upstream, pool))
	argv := pinned(proxyCPU, s.binary, "run", "-c", cfg)
	if s.cpuprofile != "" {
		argv = append(argv, "-cpuprofile", s.cpuprofile)
	}
	return argv, []string{"GOMAXPROCS=1"}, err
}

// nginxCommon is the part of an nginx config that keeps every file
// nginx writes inside dir: pid, error log and the temp paths.
func nginxCommon(dir string, noFile uint64) (string, error) {
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	return fmt.Sprintf(`worker_processes 1;
worker_rlimit_nofile %d;
pid %s/nginx.pid;
error_log %s/error.log warn;
events {
    worker_connections 20000;
}
`, noFile, dir, dir), nil
}

func nginxTemp(dir string) string {
	var b strings.Builder
	for _, k := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&b, "    %s_temp_path %s/tmp/%s;\n", k, dir, k)
	}
	return b.String()
}

// nginxArgv runs nginx in the foreground with everything under dir;
// -e keeps it from opening the compiled-in error log before it has
// read the config.
func nginxArgv(binary, dir string) []string {
	return []string{binary, "-p", dir + "/", "-e", dir + "/error.log",
		"-c", dir + "/nginx.conf", "-g", "daemon off;"}
}

func nginxConfig(s site) ([]string, []string, error) { return nginxWith(s, "") }

// nginxSendfileConfig is nginx with sendfile on.
func nginxSendfileConfig(s site) ([]string, []string, error) {
	return nginxWith(s, "    sendfile on;\n")
}

func nginxWith(s site, extra string) ([]string, []string, error) {
	common, err := nginxCommon(s.dir, s.noFile)
	if err != nil {
		return nil, nil, err
	}
	// keepalive_requests is raised from its default of 1000 on both
	// sides so that nginx, like the others, does not close connections
	// after a number of requests.
	// With a log, nginx's defaults: the combined format, a write per line.
	accessLog := "off"
	if s.accessLog != "" {
		accessLog = s.accessLog
	}
	// Over TLS: TLS 1.3 only, and of its cipher suites the one Go's
	// servers choose (nginx would otherwise take the client's first,
	// AES-256-GCM from OpenSSL's clients). Session resumption as by
	// default: tickets on, with keys nginx makes at start; no session
	// cache, which TLS 1.3 tickets do not need.
	listen, tlsConf := "", ""
	if s.tls != nil {
		listen = " ssl"
		if s.h2 {
			// nginx 1.22's way; "http2 on;" came in 1.25.1.
			listen += " http2"
		}
		tlsConf = fmt.Sprintf(`        ssl_certificate %s;
        ssl_certificate_key %s;
        ssl_protocols TLSv1.3;
        ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;
`, s.tls.cert, s.tls.key)
	}
	keepalive := ""
	if s.idleTimeout > 0 {
		keepalive = "    keepalive_timeout " + seconds(s.idleTimeout) + ";\n"
	}
	// Files as nginx is usually set to serve them: sendfile, and the
	// head in the body's first packet; no open file cache (sluice keeps
	// none either).
	static := ""
	if s.static != "" {
		static = fmt.Sprintf("        location /static/ { alias %s/; sendfile on; tcp_nopush on; }\n", s.static)
	}
	// The cache scenarios: proxy_cache in files (nginx keeps only keys in
	// memory, the bodies in the page cache), 256 MiB.
	cachePath, cacheUse := "", ""
	if s.cache {
		cachePath = fmt.Sprintf("    proxy_cache_path %s/cache levels=1:2 keys_zone=c:16m max_size=256m inactive=1h use_temp_path=off;\n", s.dir)
		cacheUse = "            proxy_cache c;\n"
	}
	conf := common + fmt.Sprintf(`http {
    access_log %s;
%s%s%s%s    keepalive_requests 1000000;
    upstream app {
        server %s;
        keepalive 256;
        keepalive_requests 1000000;
        keepalive_timeout 60s;
    }
    server {
        listen 127.0.0.1:%d%s backlog=4096;
%s        client_max_body_size 1m;
%s        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
%s        }
    }
}
`, accessLog, nginxTemp(s.dir), extra, cachePath, keepalive, s.upstream, s.port, listen, tlsConf, static, cacheUse)
	if err := writeFile(filepath.Join(s.dir, "nginx.conf"), conf); err != nil {
		return nil, nil, err
	}
	return pinned(proxyCPU, nginxArgv(s.binary, s.dir)...), nil, nil
}

func haproxyConfig(s site) ([]string, []string, error) {
	// maxconn must cover the idle-connections scenario. HAProxy counts
	// two descriptors per connection and refuses to start when
	// RLIMIT_NOFILE is lower, unless told "no strict-limits"; idle
	// client connections hold no server connection (http-reuse always),
	// so one descriptor each is what they really use.
	maxconn := s.idleConns + 1000
	// Over TLS: TLS 1.3 only, with the cipher suite Go's servers choose
	// (HAProxy prefers its own order, whose first is AES-256-GCM); tickets
	// and its session cache as by default.
	globalTLS, bindTLS := "", ""
	if s.tls != nil {
		globalTLS = "    ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256\n    ssl-default-bind-options ssl-min-ver TLSv1.3\n"
		bindTLS = " ssl crt " + s.tls.pem
		if s.h2 {
			bindTLS += " alpn h2,http/1.1"
		}
	}
	idle := "60s"
	if s.idleTimeout > 0 {
		idle = seconds(s.idleTimeout)
	}
	conf := fmt.Sprintf(`global
    nbthread 1
    maxconn %d
    no strict-limits
%s
defaults
    mode http
    maxconn %d
    timeout connect 5s
    timeout client %s
    timeout server 60s
    timeout http-request 10s
    timeout http-keep-alive %s
    http-reuse always

frontend fe
    bind 127.0.0.1:%d%s
    default_backend app

backend app
%s    server s1 %s
%s`, maxconn, globalTLS, maxconn, idle, idle, s.port, bindTLS, haproxyCacheUse(s), s.upstream, haproxyCache(s))
	cfg := filepath.Join(s.dir, "haproxy.cfg")
	if err := writeFile(cfg, conf); err != nil {
		return nil, nil, err
	}
	return pinned(proxyCPU, s.binary, "-f", cfg, "-db"), nil, nil
}

// haproxyCache is the cache section of the cache scenarios: 256 MiB in
// memory, objects up to 2 MiB, kept as long as they are fresh.
func haproxyCache(s site) string {
	if !s.cache {
		return ""
	}
	return "\ncache c\n    total-max-size 256\n    max-object-size 2097152\n    max-age 3600\n"
}

func haproxyCacheUse(s site) string {
	if !s.cache {
		return ""
	}
	return "    http-request cache-use c\n    http-response cache-store c\n"
}

// varnishConfig runs varnishd in the foreground with its built-in VCL
// in front of the upstream: its malloc storage of 256 MiB, one thread
// pool (as every proxy here, one worker on one CPU), no jail (it runs as
// whoever runs the comparison), its work directory in the temp dir.
func varnishConfig(s site) ([]string, []string, error) {
	host, port, _ := strings.Cut(s.upstream, ":")
	vcl := fmt.Sprintf("vcl 4.1;\nbackend default {\n    .host = %q;\n    .port = %q;\n}\n", host, port)
	file := filepath.Join(s.dir, "default.vcl")
	if err := writeFile(file, vcl); err != nil {
		return nil, nil, err
	}
	return pinned(proxyCPU, s.binary, "-F", "-j", "none", "-n", filepath.Join(s.dir, "work"),
		"-a", fmt.Sprintf("127.0.0.1:%d", s.port), "-f", file, "-s", "malloc,256m",
		"-p", "thread_pools=1", "-p", "thread_pool_min=10", "-p", "thread_pool_max=1000"), nil, nil
}

func caddyConfig(s site) ([]string, []string, error) {
	// Caddy writes no access log unless a site asks for one; the
	// default (process) log is discarded. With a log, Caddy's default
	// format (JSON).
	siteLog := ""
	if s.accessLog != "" {
		siteLog = fmt.Sprintf("\tlog {\n\t\toutput file %s\n\t}\n", s.accessLog)
	}
	// Over TLS: the run's certificate, TLS 1.3 only, HTTP/1.1 and HTTP/2
	// (Caddy's default without HTTP/3, whose QUIC listener nobody here
	// uses), and HTTP/3 in the HTTP/3 scenarios; the cipher suite and
	// session tickets are Go's, as sluice's.
	scheme, servers, siteTLS := "http", "", ""
	if s.tls != nil {
		scheme = "https"
		servers = "\t\tprotocols h1 h2\n"
		if s.h3 {
			servers = "\t\tprotocols h1 h2 h3\n"
		}
		siteTLS = fmt.Sprintf("\ttls %s %s {\n\t\tprotocols tls1.3\n\t}\n", s.tls.cert, s.tls.key)
	}
	if s.idleTimeout > 0 {
		servers += "\t\ttimeouts {\n\t\t\tidle " + seconds(s.idleTimeout) + "\n\t\t}\n"
	}
	if servers != "" {
		servers = "\tservers {\n" + servers + "\t}\n"
	}
	conf := fmt.Sprintf(`{
	admin off
	auto_https off
	log {
		output discard
	}
%s}

%s://:%d {
	bind 127.0.0.1
%s%s	reverse_proxy %s {
		transport http {
			keepalive 60s
			keepalive_idle_conns 256
			keepalive_idle_conns_per_host 256
		}
	}
}
`, servers, scheme, s.port, siteTLS, siteLog, s.upstream)
	cfg := filepath.Join(s.dir, "Caddyfile")
	if err := writeFile(cfg, conf); err != nil {
		return nil, nil, err
	}
	env := []string{
		"GOMAXPROCS=1",
		"HOME=" + s.dir,
		"XDG_DATA_HOME=" + filepath.Join(s.dir, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(s.dir, "config"),
	}
	return pinned(proxyCPU, s.binary, "run", "--config", cfg, "--adapter", "caddyfile"), env, nil
}

// Bodies the upstream serves, by path. /small and /post are answered by
// "return" from memory; /16k and /1m are static files (sendfile, open
// file cache).
const (
	smallBody = "hello from the upstream\n"
	postBody  = "ok\n"
	size16k   = 16 << 10
	size1m    = 1 << 20
)

// upstreamConfig writes the config of the upstream: one nginx worker
// answering from memory or from small static files, pinned to the
// load CPU. With status, it also serves its stub_status page at
// statusPath, whose accepts counter tells how many connections the
// proxies open to it.
func upstreamConfig(binary, dir string, port int, noFile uint64, status bool) ([]string, error) {
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(www, "static"), 0o755); err != nil {
		return nil, err
	}
	files := map[string]string{"16k": strings.Repeat("0123456789abcdef", size16k/16),
		"1m": strings.Repeat("0123456789abcdef", size1m/16)}
	// What the proxies serve themselves in the static scenarios.
	files["static/small.txt"] = smallBody
	files["static/1m.bin"] = files["1m"]
	for name, b := range files {
		if err := writeFile(filepath.Join(www, name), b); err != nil {
			return nil, err
		}
	}
	common, err := nginxCommon(dir, noFile)
	if err != nil {
		return nil, err
	}
	statusLocation := ""
	if status {
		statusLocation = fmt.Sprintf("        location = %s { stub_status; }\n", statusPath)
	}
	conf := common + fmt.Sprintf(`http {
    access_log off;
%s    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    open_file_cache max=16 inactive=600s;
    server {
        listen 127.0.0.1:%d backlog=4096;
        client_max_body_size 1m;
        location = /small { return 200 %q; }
        location = /post { return 200 %q; }
        location = /cached/small { add_header Cache-Control "max-age=3600"; return 200 %q; }
        location = /cached/1m { add_header Cache-Control "max-age=3600"; alias %s/1m; }
%s        location / { root %s; }
    }
}
`, nginxTemp(dir), port, smallBody, postBody, smallBody, www, statusLocation, www)
	if err := writeFile(filepath.Join(dir, "nginx.conf"), conf); err != nil {
		return nil, err
	}
	return pinned(loadCPU, nginxArgv(binary, dir)...), nil
}
