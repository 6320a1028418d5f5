package config

import (
	"io/fs"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sluice-proxy/sluice/accesslog"
	"github.com/sluice-proxy/sluice/auth"
	"github.com/sluice-proxy/sluice/balance"
	"github.com/sluice-proxy/sluice/pool"
	"github.com/sluice-proxy/sluice/proxy"
	"github.com/sluice-proxy/sluice/ratelimit"
	"github.com/sluice-proxy/sluice/retry"
)

// Config is a validated sluice configuration. Every field holds either
// the value from the file or its documented default; a *Config returned
// by Parse or Load never needs further checking.
//
// The YAML key of each field is given in its doc comment, with the
// default and the accepted range.
type Config struct {
	// File is the name given to Parse, or the path given to Load.
	File string

	// Listen (key "listen", required, at least one) lists the addresses
	// sluice accepts client connections on. No two may be equal, unless
	// their port is 0.
	Listen []Listener

	// Timeouts (key "timeouts") bounds the downstream (client) side.
	Timeouts Timeouts

	// Limits (key "limits") bounds request heads and the upstream
	// connection pool.
	Limits Limits

	// AccessLog (key "access_log") configures the one-line-per-request log.
	AccessLog AccessLog

	// Log (key "log") configures the error and event log, which is
	// separate from the access log.
	Log Log

	// Forwarded (key "forwarded") says which headers sluice adds to
	// requests it sends upstream.
	Forwarded Forwarded

	// Metrics (key "metrics") configures the Prometheus endpoint.
	Metrics Metrics

	// PIDFile (key "pid_file", default "": none) is a file sluice run
	// writes its process ID to as it starts serving, which sluice reload
	// and sluice upgrade read to signal it. A binary upgrade's new process
	// replaces it; the process that wrote it removes it as it exits.
	PIDFile string
	// Admin (key "admin") configures the admin listener: health and
	// readiness, metrics, the running config, the upstreams' state with
	// drain and enable, and the live status page.
	Admin Admin

	// Routes (key "routes", required, at least one) maps requests to
	// upstreams. The first route that matches a request wins; a request
	// no route matches is answered with 404.
	Routes []Route

	// Upstreams (key "upstreams", required, at least one) is a mapping
	// from upstream name to upstream, kept here in file order. An
	// upstream no route refers to is allowed.
	Upstreams []*Upstream

	// Redis (key "redis", default none) is the Redis server that a fleet
	// of sluice instances keeps shared state in: the budgets of the
	// routes whose rate_limit has store: redis, the idempotency records
	// of those whose idempotency has store: redis, and the ACME
	// certificates of the acme sections with storage: redis.
	Redis *Redis

	// Errors (key "errors", default none) are the pages of the answers
	// sluice makes itself, for every route (whose own errors win for a
	// status both give) and for the requests no route matches (404).
	Errors []ErrorPage

	// Cache (key "cache", default none) names the stores routes' caches
	// keep responses in (see CacheSection).
	Cache *CacheSection

	warnings []Problem // see Warnings
}

// Warnings returns what the file may say but most likely did not mean,
// in the order of the file: a route that an earlier route leaves no
// request to, say. sluice validate prints them, and sluice run and a
// reload log them; none stops the file from loading.
func (c *Config) Warnings() []Problem { return c.warnings }

// Redis is the connection to a Redis server.
type Redis struct {
	// Address (key "address", required) is the server's host:port.
	Address string
	// Password (key "password", default "" = none) is sent with AUTH.
	Password string
	// DB (key "db", default 0, 0..15) is the database selected.
	DB int
	// Timeout (key "timeout", default 50ms, > 0) bounds each round trip
	// of the idempotency layers to the server (connecting included); a
	// request whose round trip fails or takes longer follows its
	// on_store_error. Rate limits have their own, store_timeout.
	Timeout time.Duration
	// Line is the line of the section in the file, for messages.
	Line int
}

// RateLimit limits the rate of a route's requests, per key, with the
// GCRA (see package ratelimit): a request over the limit is answered 429
// with Retry-After, Proxy-Status and the RateLimit-Policy and RateLimit
// fields, and its access log line ends rate_limited=true.
type RateLimit struct {
	// Rate (key "rate", required) is the steady rate a key may keep up: a
	// whole number of requests per s, m or h ("100/s", "6000/m", "10/h"),
	// at most 1000000/s.
	Rate ratelimit.Rate
	// Burst (key "burst", default 1, 1..1000000) is how many requests a
	// key may make at once after a quiet spell, on top of which the rate
	// refills; 1, nginx's limit_req without burst, spaces every request.
	Burst int
	// Key (key "key", default "client_ip") is what a budget belongs to:
	// "client_ip" (the connection's address; an IPv6 one's /64),
	// "header:NAME" (the header's
	// value; a request without it is keyed by its client's address), or
	// "route" (one budget for the whole route).
	Key string
	// Store (key "store", default "local") is where the budgets are kept:
	// "local", in this sluice's memory, at most 100,000 keys per route
	// (about 10 MB), the budgets closest to whole forgotten first beyond
	// that, and carried over by a reload when the route stays; or
	// "redis", in the top-level redis section's server, one budget for
	// every sluice using it, timed by the server's clock.
	Store string
	// OnStoreError (key "on_store_error", default "allow") is what
	// becomes of a request when Redis does not answer within
	// StoreTimeout: "allow" lets it through, "deny" answers 503. Either
	// way it is counted, noted rate_limit_store=error in the access log,
	// and logged (a line per 10 seconds at most).
	OnStoreError string
	// StoreTimeout (key "store_timeout", default 50ms, > 0) bounds the
	// wait for Redis on each request.
	StoreTimeout time.Duration
	// Line is the line of the section in the file, for messages.
	Line int

	storeLine, storeColumn int // of the store value, for the check that redis is set
}

// Listener is one address sluice accepts client connections on.
type Listener struct {
	// Address (key "address", required) is a host:port to listen on, as
	// for net.Listen. The host may be empty (all interfaces); the port
	// is a number in 0..65535, 0 meaning any free port. "unix:PATH"
	// listens on a Unix domain socket at PATH (absolute, at most 107
	// bytes), for a proxy in front on the same host: a socket file left
	// by a process that is gone is removed first (one a live process
	// listens on is not), a reload keeps the socket, a binary upgrade
	// hands it over, and a shutdown removes the file. Its clients are
	// "unix:" (see Forwarded.Trusted).
	Address string
	// Mode (key "mode", default 0666 as nginx's, only with a unix:
	// address, 0..0777 in octal) is the socket file's mode: who may
	// connect (writing to it is connecting). A reload applies it.
	Mode fs.FileMode
	// TLS (key "tls", default none: plain HTTP) terminates TLS on the
	// listener.
	TLS *ListenerTLS
	// RedirectHTTPS (key "redirect_https", default false), on a listener
	// without tls, answers every request with 308 to https://, the host
	// without its port, the path and the query kept.
	RedirectHTTPS bool
	// HTTPSPort (key "https_port", default 0, only with redirect_https,
	// 1..65535) is the port the redirects name, for a TLS port that
	// clients reach on another port than sluice listens on (a port
	// mapping). 0 means the port of the first listener with tls in the
	// file, as bound, or 443 when there is none; 443 is left out of the
	// URL.
	HTTPSPort int
	// Protocols (key "protocols") are the protocols served. On a listener
	// with tls they are the ALPN preference, most preferred first, of
	// "h2" and "http/1.1" (default [h2, http/1.1]). On a plain listener,
	// "h2c" serves HTTP/2 to clients that open with its preface (prior
	// knowledge), beside HTTP/1.1, which a plain listener always serves
	// (default [http/1.1]); "h2" there is an error (h2 is HTTP/2 over
	// TLS). An "Upgrade: h2c" request is served as HTTP/1.1, and its
	// Upgrade field is not forwarded. "h3" on a listener with tls also
	// serves HTTP/3 on a UDP socket bound to the same address and port,
	// and the answers of the TCP listener carry Alt-Svc: h3=":PORT" so
	// that clients move to it; on a plain listener it is an error (QUIC
	// has TLS built in).
	Protocols []string
	// EarlyData (key "early_data", default "off") is whether HTTP/3
	// clients may send requests in 0-RTT (TLS early data) on a listener
	// that serves h3: "off" refuses 0-RTT, every request waits for the
	// handshake; "safe" accepts it, forwards a request that came in it
	// only when its method is safe (GET, HEAD, OPTIONS) and it has no
	// body, with Early-Data: 1 upstream, and answers any other 425 Too
	// Early (RFC 8470), which the client repeats after the handshake.
	EarlyData string
	// Line is the line of the listener in the file, for messages.
	Line int
}

// ListenerTLS is a listener's TLS termination. Its files are read when the
// config is built (Build), at start and at every reload.
type ListenerTLS struct {
	// Certificates (key "certificates", at least one unless ACME is
	// given) are the certificates served, chosen by the name a client
	// asks for (SNI): exact names, then wildcards (*.example.com); the
	// first is the default, for clients that ask for no name or one no
	// certificate holds. Beside ACME: a certificate that names the
	// client's name exactly, then ACME's for its domains, then a
	// wildcard, then the first certificate.
	Certificates []CertificateFiles
	// ACME (key "acme", default none) gets certificates from an ACME CA
	// for the domains it lists, obtained and renewed by sluice.
	ACME *ACME
	// Internal (key "internal", default none) has sluice's own local CA
	// issue the certificates, for development and private networks:
	// true for the defaults, or a mapping of its settings. Not with
	// certificates nor acme.
	Internal *InternalTLS
	// MinVersion (key "min_version", default "1.2") is the oldest TLS
	// version accepted: "1.2" or "1.3".
	MinVersion string
	// ClientAuth (key "client_auth", default none) asks clients for
	// certificates.
	ClientAuth *ClientAuth
}

// ACME is where a TLS listener's certificates come from when an ACME CA
// issues them (package acme): obtained in the background at start (a
// client asking for a domain before its certificate came is refused),
// renewed when a third of their lifetime is left, kept in Storage across
// restarts.
type ACME struct {
	// Domains (key "domains", required, at least one) are the names to
	// get certificates for, one each: DNS names, no wildcards, no IP
	// addresses; stored lower case without a trailing dot.
	Domains []string
	// Email (key "email", default "": none) is the ACME account's contact
	// address, for the CA to write to about the certificates.
	Email string
	// CA (key "ca", default Let's Encrypt's,
	// https://acme-v02.api.letsencrypt.org/directory) is the https URL of
	// the CA's ACME directory.
	CA string
	// CARoot (key "ca_root", default "": the system's roots alone) is a
	// PEM file of CA certificates trusted besides the system's for the
	// ACME CA's own TLS certificate: a private CA's, or a test's.
	CARoot string
	// Storage (key "storage", default /var/lib/sluice/acme) is where the
	// ACME account, the certificates and their keys are kept: a
	// directory (made, mode 0700, when missing) that must be writable,
	// or creatable; or, for a fleet of sluice instances that share them
	// (one obtains and renews each certificate, the others load it),
	// "redis", the top-level redis section's server, or a redis:// URL
	// (rediss:// over TLS), redis://[:PASSWORD@]HOST:PORT[/DB].
	Storage string
	// StorageKeyFile (key "storage_key_file", required with a Redis
	// storage, and only then) holds the key that encrypts what the
	// Redis storage keeps, shared by the fleet's instances: 32 random
	// bytes in base64 (openssl rand -base64 32) or hex. It is read when
	// the config is built.
	StorageKeyFile string
	// DNS (key "dns"), when set, has the CA validate by DNS-01, TXT
	// records written by RFC 2136 dynamic updates, instead of HTTP-01 and
	// TLS-ALPN-01 on the listeners; a wildcard domain needs it.
	DNS *ACMEDNS
	// Line is the line of acme in the file, for messages.
	Line int

	storageLine, storageColumn int // of the storage value, for the check that redis is set
}

// ACMEDNS is acme.dns: where and how the DNS-01 challenge's TXT records
// are written.
type ACMEDNS struct {
	// Server (key "server") is the host:port of the zone's DNS server
	// that takes dynamic updates (its primary). Server or Exec, one of
	// them.
	Server string
	// Exec (key "exec") is a hook program and its first arguments, a
	// list (or one path), run with present or cleanup, the record's name
	// (with its final dot) and its value to write or remove the record
	// itself: for a DNS provider that takes no updates.
	Exec []string
	// KeyName (key "key_name", default "": updates unsigned) is the TSIG
	// key the updates are signed with, as the server knows it.
	KeyName string
	// KeyAlgorithm (key "key_algorithm", default hmac-sha256) is its HMAC:
	// hmac-sha224, hmac-sha256, hmac-sha384, hmac-sha512 or hmac-sha1.
	KeyAlgorithm string
	// KeyFile (key "key_file", required with key_name) holds the key's
	// secret, base64: alone, or as the secret "..." line of the key
	// block tsig-keygen writes.
	KeyFile string
	// Resolvers (key "resolvers", default: the system's) are host:port
	// DNS resolvers that find a name's zone and watch the record appear.
	Resolvers []string
	// PropagationTimeout (key "propagation_timeout", default 2m) is how
	// long to wait for the record to be answered before the CA is asked
	// to look; 0 does not wait.
	PropagationTimeout time.Duration
	// OverrideDomain (key "override_domain", default "") is where the
	// records are written instead of _acme-challenge.DOMAIN, which is a
	// CNAME to it: a zone that takes updates answers for a DNS that does
	// not.
	OverrideDomain string
	// Line is the line of dns in the file, for messages.
	Line int
}

// InternalTLS is a TLS listener's local CA (package localca): a root made
// once in Storage, and a certificate issued on demand for each name a
// client asks for (SNI), valid for 7 days and issued again when a third
// of that is left. A client that asks for a name it does not issue for,
// or a new one past MaxCertificates, gets the default certificate
// (localhost, 127.0.0.1, ::1). Listeners with the same Storage share one
// CA, and must agree on its settings.
type InternalTLS struct {
	// Names (key "names", default: the hosts of the routes) are the
	// names certificates are issued for: DNS names, patterns
	// ("*.app.test": any name with one or more labels in front of
	// app.test) and IP addresses; localhost, 127.0.0.1 and ::1 always.
	// Stored lower case without a trailing dot. nil means the default.
	Names []string
	// AnyName (key "any_name", default false) issues for any name a
	// client asks for, up to MaxCertificates.
	AnyName bool
	// MaxCertificates (key "max_certificates", default 100, 1..10000) is
	// the most certificates held, in memory and in Storage, the default
	// one included.
	MaxCertificates int
	// Storage (key "storage", default localca.DefaultStorage():
	// $STATE_DIRECTORY/pki under systemd, /var/lib/sluice/pki as root,
	// else the user's data directory, ~/.local/share/sluice/pki) is the
	// directory of the root certificate (root.crt, the file clients
	// trust) and key, and of the certificates issued (made, mode 0700,
	// when missing): it must be writable, or creatable.
	Storage string
	// Line is the line of internal in the file, for messages.
	Line int
}

// DefaultACMEStorage is where ACME certificates are kept unless
// acme.storage says otherwise.
const DefaultACMEStorage = "/var/lib/sluice/acme"

// CertificateFiles names a certificate chain and its key, PEM files.
// Relative paths are relative to sluice's working directory.
type CertificateFiles struct {
	// Cert (key "cert", required) is the certificate, then the
	// intermediates clients need, PEM CERTIFICATE blocks.
	Cert string
	// Key (key "key", required) is its private key, a PEM PRIVATE KEY,
	// EC PRIVATE KEY or RSA PRIVATE KEY block, not encrypted.
	Key string
	// Line is the line of the entry in the file, for messages.
	Line int
}

// ClientAuth asks a TLS listener's clients for certificates.
type ClientAuth struct {
	// CA (key "ca", required) is the file of the CA certificates client
	// certificates must chain to, PEM CERTIFICATE blocks.
	CA string
	// Mode (key "mode", default "require") is "require": a client without
	// a certificate that verifies is refused; or "verify_if_given": a
	// client may send none, and one that sends one that does not verify
	// is refused.
	Mode string
	// Line is the line of client_auth in the file, for messages.
	Line int
}

// Timeouts bounds the downstream (client) side of sluice.
type Timeouts struct {
	// Header (key "header", default 10s, > 0) is the time allowed to read
	// each request head, counted from its first byte.
	Header time.Duration
	// Idle (key "idle", default 60s, > 0) is how long a keep-alive client
	// connection may sit idle between requests before it is closed.
	Idle time.Duration
	// Drain (key "drain", default 30s, >= 0) is how long in-flight
	// requests may take to finish after SIGTERM; 0 means they are cut
	// off at once.
	Drain time.Duration
	// Body (key "body", default 60s, > 0) bounds each wait for the next
	// bytes of a request body.
	Body time.Duration
	// Send (key "send", default 60s, > 0) bounds each write to a client
	// (within a sixteenth of it, at most a second, late; never early).
	Send time.Duration
	// StreamIdle (key "stream_idle", default 5m, > 0) replaces body and
	// the upstream's read timeout for a gRPC call once its response head
	// has come: a stream with no bytes either way for this long is cut.
	StreamIdle time.Duration
}

// Limits bounds request heads and the upstream connection pool.
type Limits struct {
	// MaxHeaderBytes (key "max_header_bytes", default 64KiB, 1KiB..1MiB)
	// is the largest request head accepted, request line included; a
	// larger one is answered with 431.
	MaxHeaderBytes int64
	// MaxHeaders (key "max_headers", default 100, 1..10000) is the most
	// header fields a request may carry; more are answered with 431.
	MaxHeaders int
	// MaxIdleUpstreamConns (key "max_idle_upstream_conns", default 1024,
	// >= 0) caps the idle pooled upstream connections of all upstreams
	// together; 0 keeps none. A reload applies it to the pool every
	// server of the process shares (PoolBound).
	MaxIdleUpstreamConns int
	// H2 (key "h2") bounds what a client may do on an HTTP/2 connection.
	H2 H2Limits
	// H3 (key "h3") bounds what a client may do on an HTTP/3 connection.
	H3 H3Limits
}

// H3Limits bound each downstream HTTP/3 connection.
type H3Limits struct {
	// MaxConcurrentStreams (key "max_concurrent_streams", default 100,
	// 1..10000) is the most request streams a client may have open at
	// once, those whose answer sluice is still making included (QUIC's
	// MAX_STREAMS: the client cannot open more).
	MaxConcurrentStreams int
	// MaxHeaderList (key "max_header_list", default 64KiB, 1KiB..1MiB)
	// bounds a request's decoded field section, pseudo-fields included;
	// a larger one is answered 431.
	MaxHeaderList int64
	// IdleTimeout (key "idle_timeout", default 30s) closes a connection
	// with no packet either way for this long (QUIC's idle timeout).
	IdleTimeout time.Duration
	// RetryAbove (key "retry_above", default 1000, 0..1000000) is the rate
	// of new connection attempts a second on the listener's socket above
	// which each must first prove its address with a Retry token (RFC
	// 9000 §8.1.2): a round trip more for the client, no state for a flood
	// from spoofed addresses. 0 asks it of every new connection, as
	// nginx's quic_retry on.
	RetryAbove int
	// RapidResetStreams (key "rapid_reset_streams", default twice
	// max_concurrent_streams, 1..1000000) and RapidResetPercent (key
	// "rapid_reset_percent", default 50, 1..100) are the rapid reset rule:
	// once a client has opened RapidResetStreams request streams on a
	// connection, it is closed (H3_EXCESSIVE_LOAD) when it reset more than
	// RapidResetPercent percent of them before their answer; 100 turns
	// the rule off. 0 RapidResetStreams is the default.
	RapidResetStreams int
	RapidResetPercent int
}

// PoolBound is the most idle connections the process's connection pool
// holds under l (pool.New, Pool.SetMaxTotal). With MaxIdleUpstreamConns 0
// no upstream pools any (Build sets their max_idle to 0), and the bound
// is 1, as the pool takes 0 for no bound.
func (l Limits) PoolBound() int { return max(1, l.MaxIdleUpstreamConns) }

// H2Limits bound each downstream HTTP/2 connection. Towards an upstream,
// sluice honours the upstream's own SETTINGS.
type H2Limits struct {
	// MaxConcurrentStreams (key "max_concurrent_streams", default 250,
	// 1..10000) is the most streams a client may have open at once; a
	// stream past it is refused (RST_STREAM REFUSED_STREAM: the client
	// may retry it).
	MaxConcurrentStreams int
	// InitialWindow (key "initial_window", default 1MiB, 64KiB..16MiB)
	// is how much of each request body a client may send before sluice
	// has passed it on (each stream's flow-control window).
	InitialWindow int64
	// MaxHeaderList (key "max_header_list", default 64KiB, 1KiB..1MiB)
	// bounds a request's decoded header list, pseudo-header fields
	// included.
	MaxHeaderList int64
}

// AccessLog configures the access log: one line per request.
type AccessLog struct {
	// Enabled (key "enabled", default true) turns the access log on.
	Enabled bool
	// Format (key "format", default "text") is "text" or "json" (slog's
	// key=value and JSON lines, every field named), "combined" (nginx's
	// combined format), or a format of fields, as nginx's log_format:
	// '$client $method $target $status $duration' (package accesslog has
	// the fields: those of the JSON line, and nginx's names for them). An
	// unknown field is an error.
	Format string
	// template is Format parsed, when it is a format of fields or a
	// named one; Build parses Format when it is nil.
	template *accesslog.Format
	// Path (key "path", default "") is the file the log is appended to;
	// "" means standard error.
	Path string
	// Buffer (key "buffer", default 64KiB, 0..16MiB) gathers lines and
	// writes them together: when it fills, and at the latest Flush after
	// the first line it holds. 0 writes each line at once, a system call
	// per request. Lines still in the buffer when the process is killed
	// are lost; a shutdown writes them.
	Buffer int64
	// Flush (key "flush", default 1s) is the longest a line waits in the
	// buffer.
	Flush time.Duration
}

// Log configures the error and event log.
type Log struct {
	// Level (key "level", default "info") is the least severe level
	// written: "debug", "info", "warn" or "error".
	Level string
	// Format (key "format", default "text") is "text" or "json".
	Format string
}

// Forwarded says which headers sluice adds to requests it sends
// upstream. Each defaults to true.
type Forwarded struct {
	// XForwardedFor (key "x_forwarded_for", default true) appends the
	// client's address to X-Forwarded-For.
	XForwardedFor bool
	// XForwardedProto (key "x_forwarded_proto", default true) sets
	// X-Forwarded-Proto to the scheme the client used.
	XForwardedProto bool
	// XForwardedHost (key "x_forwarded_host", default true) sets
	// X-Forwarded-Host to the Host the client sent.
	XForwardedHost bool
	// Via (key "via", default true) appends sluice to the Via header.
	Via bool
	// RequestID (key "request_id", default true) gives every request an
	// id in X-Request-Id: a trusted peer's kept, otherwise one sluice
	// makes (32 hex digits). It is sent upstream, returned to the client
	// on every answer, sluice's own included, and logged (request_id).
	RequestID bool
	// Trusted (key "trusted", default [] = none) lists the peers (load
	// balancers, proxies in front of sluice) whose X-Forwarded-For,
	// -Proto and -Host (and X-Request-Id) are kept, For extended with the peer's address;
	// from every other client those fields are replaced. Each is an
	// address prefix (10.0.0.0/8) or an address (127.0.0.1, held as
	// 127.0.0.1/32), stored masked; "unix:" trusts the peers of the
	// Unix socket listeners (TrustUnix), as nginx's set_real_ip_from
	// unix:.
	Trusted []netip.Prefix
	// TrustUnix is set by "unix:" in trusted.
	TrustUnix bool
	// ClientIP (key "client_ip", default "peer") says who the client is:
	// "peer", the address of the connection; or "x_forwarded_for": for a
	// request from a trusted peer, the rightmost address in its
	// X-Forwarded-For that is not itself trusted (the leftmost when all
	// are), as nginx's real_ip module with real_ip_recursive. That address
	// is then the client for allow and deny lists, rate limits by
	// client_ip, hash balancing and the access log (which adds peer=, the
	// connection's address). It needs trusted peers.
	ClientIP string
}

// Metrics configures the Prometheus metrics endpoint.
type Metrics struct {
	// Address (key "address", default "") is the host:port, or
	// "unix:PATH" (a socket of mode 0666: metrics are read only), serving
	// Prometheus metrics at /metrics; "" turns the endpoint off. It may
	// not equal a listen address.
	Address string
}

// Admin configures the admin listener (package admin serves it).
type Admin struct {
	// Address (key "address", default "") is the host:port (or
	// "unix:PATH", a Unix domain socket) serving /live,
	// /ready, /metrics, /status, /api/config and /api/upstreams (with
	// drain and enable); "" turns the listener off. It may not equal a
	// listen address or metrics.address. A reload (SIGHUP) moves the
	// listener to a new address; turning it on or off takes a restart.
	Address string
	// Pprof (key "pprof", default false) also serves Go's profiler at
	// /debug/pprof/ on the admin address; a reload applies a change.
	Pprof bool
	// TokenFile (key "token_file", default "" = none) names a file whose
	// contents (surrounding whitespace trimmed, at least 16 bytes) every
	// request but /live and /ready must carry: as a bearer token, or as
	// the password of basic authentication. A reload reads it again.
	TokenFile string
	// Mode (key "mode", default 0666, only with a unix: address) is the
	// socket file's mode, as Listener.Mode: with 0600 or 0660, only its
	// owner (and group) may reach the admin listener.
	Mode fs.FileMode
}

// Route sends the requests it matches to an upstream. A route matches
// a request when its Host and its path condition (PathPrefix, Path or
// PathRegex, at most one of them) match; an empty one matches anything.
// Routes are tried in the order of the file and the first that matches
// wins, whatever its kind of path condition; a route that an earlier one
// leaves nothing to match (the same host or a wider one, and a path
// condition that takes every path it would) is a warning (Warnings).
type Route struct {
	// Host (key "host", default "" = any host) matches the request's
	// host exactly, ignoring case and the port. "*.example.com" matches
	// any host with one or more labels in front of example.com, but not
	// example.com itself. Host is stored in lower case.
	Host string
	// PathPrefix (key "path_prefix", default "" = any path) matches
	// requests whose path starts with it. It must start with "/" and
	// hold only printable ASCII other than space, "?" and "#", as a path
	// does on the wire; other characters must be percent-encoded.
	PathPrefix string
	// Path (key "path", default "" = any path) matches requests whose
	// path is exactly it, as nginx's "location =": "/healthz" matches
	// neither "/healthz/" nor "/healthz?x" (the query is not part of the
	// path: it matches that), nor "/healthz.json". Its characters are
	// PathPrefix's.
	Path string
	// PathRegex (key "path_regex", default "" = any path) matches
	// requests whose path it finds a match in: Go's regular expressions
	// (RE2: no backreferences or lookaround, and matching time linear in
	// the path's length), unanchored as nginx's "location ~" ("^" and
	// "$" anchor it; "(?i)" in front ignores case). The path is matched
	// as it came, percent-encoded, without its query. Its captures,
	// numbered or named, may be used by rewrite and respond.
	PathRegex string
	// Upstream (key "upstream") names the upstream that serves the
	// route; it must be defined under "upstreams". A route has either an
	// upstream or Static, not both.
	Upstream string
	// StripPrefix (key "strip_prefix", default false) removes PathPrefix
	// from the path sent upstream, the query kept: with /api/, /api/x?q=1
	// goes as /x?q=1 and /api/ as /. A PathPrefix not ending in "/" is
	// stripped only at a segment boundary: with /api, /api/x goes as /x
	// and /api as /, and /apix, which the route matches, goes as it came.
	// Every try sends the stripped path; the access log keeps the
	// client's and ends with stripped=PREFIX. It needs a path_prefix
	// other than "/".
	StripPrefix bool
	// Rewrite (key "rewrite", default none) rewrites the path sent
	// upstream (route.Rewrite).
	Rewrite *Rewrite
	// Headers (key "headers", default none) changes header fields: of the
	// requests sent upstream, and of the responses the client gets, the
	// upstream's and those sluice makes itself for the route.
	Headers RouteHeaders
	// Allow (key "allow", default [] = every client) and Deny (key
	// "deny", default [] = none) list client address prefixes (10.0.0.0/8,
	// or an address, held as /32 or /128). Deny wins over Allow; when
	// Allow is not empty, only the clients in it are allowed. The address
	// judged is the client's: the connection's peer, or what a trusted
	// peer's X-Forwarded-For names with forwarded.client_ip:
	// x_forwarded_for. A client refused gets 403 with
	// Proxy-Status error=http_request_denied, and the access log line ends
	// with access=denied.
	Allow, Deny []netip.Prefix
	// Limits (key "limits") bounds the route's requests.
	Limits RouteLimits
	// Static (key "static") serves the route's requests from files
	// instead of an upstream; nil for a route with an upstream.
	Static *Static
	// Compress (key "compress", default nil: off) compresses the route's
	// responses; the key given, even empty ("compress: {}"), turns it on.
	Compress *Compress
	// RateLimit (key "rate_limit", default none) limits the rate of the
	// route's requests.
	RateLimit *RateLimit
	// BasicAuth (key "basic_auth", default none) lets through only the
	// requests with the credentials of a user of an htpasswd file.
	BasicAuth *BasicAuth
	// ForwardAuth (key "forward_auth", default none) asks an
	// authentication service about each request before it goes upstream.
	ForwardAuth *ForwardAuth
	// Respond (key "respond") answers the route's requests from the
	// file instead of an upstream; nil for a route with an upstream.
	Respond *Respond
	// Errors (key "errors", default none) are the pages of the answers
	// sluice makes itself for the route's requests, over the top-level
	// errors for the statuses both give.
	Errors []ErrorPage
	// Idempotency (key "idempotency", default nil: off) gives the
	// route's keyed requests the Idempotency-Key semantics: answers kept
	// and replayed, 409 while the first runs, 422 for another payload.
	Idempotency *Idempotency
	// Cache (key "cache", default nil: off) stores the route's responses
	// and answers from them (RFC 9111); the key given, even empty
	// ("cache: {}"), turns it on with the defaults.
	Cache *RouteCache
	// Line is the line of the route in the file, for messages.
	Line int

	pathRegex *regexp.Regexp // PathRegex, compiled
}

// Rewrite rewrites the path a route sends upstream, as nginx's rewrite
// does (route.Rewrite): when Regex finds a match in the request's path,
// the path becomes Replacement, expanded with the match's captures ($1,
// $name) and the request's variables ($host, $args...). The query is kept
// unless the replacement gives one ("?..."; a final "?" drops it). Every
// try sends the rewritten path; the access log keeps the client's and ends
// with rewritten=TARGET. Not with strip_prefix, static or respond.
//
// The key takes a mapping, {regex: ..., replacement: ...}, or the
// replacement alone, for a route whose path_regex gives the captures.
type Rewrite struct {
	// Regex (key "regex", default the route's path_regex) is Go's RE2,
	// matched against the path without its query, unanchored.
	Regex string
	// Replacement (key "replacement", required) is the new path: it
	// starts with "/" and may hold $1 to $9, ${N}, $name or ${name}
	// (captures, then the variables host, scheme, request_uri, uri,
	// args, is_args) and $$ for a "$".
	Replacement string
	// Line is the line of rewrite in the file, for messages.
	Line int

	re *regexp.Regexp // Regex, or the route's path_regex, compiled
}

// Respond is a route's own answer to each of its requests, as nginx's
// return (route.Respond): a fixed answer (a maintenance page, a health
// check's ok) or a redirect. A route has an upstream, static or respond,
// one of them; the answer goes to the client as it is.
type Respond struct {
	// Status (key "status", default 302 with location, else 200;
	// 200..599) is the answer's status. A 204 or 304 has no body.
	Status int
	// Location (key "location", default "" = none) is the Location of a
	// redirect (a 3xx status, or 201): a template as rewrite's
	// replacement, with the route's path_regex's captures and the
	// request's variables ("https://$host$request_uri"); visible ASCII.
	Location string
	// Headers (key "headers", default {}) maps field names to a value or a
	// list of values, each a field of the answer; Content-Length,
	// Transfer-Encoding and hop-by-hop fields cannot be named, nor
	// Location with location.
	Headers []HeaderField
	// Body (key "body", default "") is the answer's body, as written;
	// text/plain; charset=utf-8 unless headers give a Content-Type.
	Body string
	// BodyFile (key "body_file", default "" = none; not with body) is a
	// file whose contents are the body, at most 1MiB, read when the file
	// is loaded (and at each reload), relative to the config file's
	// directory; its Content-Type is its extension's (.html is text/html;
	// charset=utf-8) unless headers give one.
	BodyFile string
	// Line is the line of respond in the file, for messages.
	Line int

	body []byte // Body, or BodyFile's contents
}

// BasicAuth is HTTP basic authentication on a route (auth.Basic): a
// request without the user name and password of one of File's users gets
// 401 with a WWW-Authenticate challenge naming Realm, and nothing goes
// upstream. The route's allow, deny and rate_limit come first, so that a
// flood of guesses spends its budget rather than CPU. The access log line
// ends with user=NAME, or basic_auth=missing or basic_auth=denied.
type BasicAuth struct {
	// File (key "file", required) is an htpasswd file of bcrypt hashes
	// (htpasswd -B; cost at most 14), read when the config file is loaded
	// and at each reload, relative to the config file's directory.
	// Another kind of hash (htpasswd -m's MD5, SHA-1, crypt, plain text)
	// is an error naming its line.
	File string
	// Realm (key "realm", default "restricted") names the protected space
	// in the challenge, which browsers show; printable ASCII without '"'
	// or '\'.
	Realm string
	// ForwardAuthorization (key "forward_authorization", default false)
	// sends the request's Authorization field upstream; by default it is
	// removed: the upstream has no use for the password.
	ForwardAuthorization bool
	// Line is the line of basic_auth in the file, for messages.
	Line int

	users *auth.Users
}

// ForwardAuth asks an authentication service about each of a route's
// requests before it goes upstream (auth.Forward), as nginx's auth_request
// and Traefik's ForwardAuth: a GET of Path carrying the client's fields,
// X-Forwarded-Method, -Proto, -Host, -Uri and -For, and the request's
// X-Request-Id. A 2xx answer lets
// the request through, with the answer's ResponseHeaders in it; any other
// answer goes to the client as it came (a 401, a 302 to a login page). A
// service that cannot be reached, or fails, or is too slow, lets nothing
// through: 502, or 504 for a timeout, with Proxy-Status. It comes after
// the route's allow, deny, rate_limit and basic_auth. The access log line
// ends with forward_auth=STATUS, or forward_auth=error.
type ForwardAuth struct {
	// Address (key "address", required) is the service's host:port, or
	// unix:PATH; the connections are pooled, in the shared pool.
	Address string
	// Path (key "path", default "/") is the target asked for, path and
	// query: visible ASCII starting with "/".
	Path string
	// Host (key "host", default "": the address, localhost for a Unix
	// socket) is the subrequest's Host field.
	Host string
	// RequestHeaders (key "request_headers", default: all) names the
	// client's fields sent to the service; left out, all of them but
	// Host, those that frame a body or belong to the connection, and the
	// X-Forwarded-* the subrequest carries itself; [] sends none.
	RequestHeaders []string
	// ResponseHeaders (key "response_headers", default []) names the
	// fields of a 2xx answer copied into the request sent upstream; a
	// client's own fields of those names are removed whatever the answer.
	ResponseHeaders []string
	// Timeouts (key "timeouts") bound the exchange: connect (default 2s)
	// the connection, response (default 5s) the rest, to the answer's
	// last byte.
	Timeouts ForwardAuthTimeouts
	// MaxBody (key "max_body", default 64KiB, 1B..16MiB) is the largest
	// body of an answer passed to the client; a larger one is a 502.
	MaxBody int64
	// Line is the line of forward_auth in the file, for messages.
	Line int
}

// ForwardAuthTimeouts bound the exchange with an authentication service.
type ForwardAuthTimeouts struct {
	Connect  time.Duration // key "connect", default 2s, > 0
	Response time.Duration // key "response", default 5s, > 0
}

// ErrorPage is the page of sluice's own answers with one status (package
// errpage), as nginx's error_page: its errors (502, 503, 504, a 404 when
// no route matches, a 413 body over its limit) and a route's refusals
// (401, 403, 429...) get the page as their body, their status and fields
// (Proxy-Status, Retry-After...) kept. Never a response relayed from an
// upstream, whatever its status, nor a respond's answer, an auth
// service's, or a gRPC call's (whose status is grpc-status). The
// "errors" key maps statuses to files.
type ErrorPage struct {
	// Status (the key, 400..599) is the status of the answers the page is
	// for.
	Status int
	// File (the value) is the page, at most 1MiB, read when the config
	// file is loaded and at each reload, relative to the config file's
	// directory; the answer's Content-Type is its extension's (.html is
	// text/html; charset=utf-8).
	File string

	body []byte
}

// maxFileBody bounds a body sluice reads from a file named in the config
// (respond's body_file, an error page): it is held in memory.
const maxFileBody = 1 << 20

// RouteHeaders are a route's header rules, for each direction.
type RouteHeaders struct {
	// Request (key "request") changes the head of every try sent
	// upstream. Host cannot be named: the request was routed by it.
	Request HeaderRules
	// Response (key "response") changes every response the client gets
	// for the route: the upstream's, and sluice's own answers (a 502,
	// 503, 504, or a 403 or 413 of the route's own rules); a request no
	// route matches gets a 404 without any.
	Response HeaderRules
}

// HeaderRules change a message's fields, in this order: Remove, then Set,
// then Add. Field names are tokens, matched ignoring case; values hold no
// control characters (no CR, LF or NUL) and no whitespace at either end.
// Content-Length, Transfer-Encoding, Trailer and the hop-by-hop fields
// (Connection, Keep-Alive, Proxy-Connection, TE, Upgrade) cannot be named:
// sluice frames the body and each connection itself.
type HeaderRules struct {
	// Set (key "set", default {}) maps field names to values: each
	// replaces every field of its name, or is added when there is none.
	Set []HeaderField
	// Add (key "add", default {}) maps field names to a value or a list
	// of values, each added as a field of its own.
	Add []HeaderField
	// Remove (key "remove", default []) lists the names of fields removed.
	Remove []string
}

// HeaderField is one field a rule sets or adds.
type HeaderField struct {
	Name, Value string
}

// RouteLimits bounds a route's requests.
type RouteLimits struct {
	// Body (key "body", default 0 = no limit) bounds a request body's
	// content: a Content-Length over it gets 413 before anything is sent
	// upstream (a client waiting for 100 Continue gets the 413 instead); a
	// chunked body, or an HTTP/2 one without content-length, that grows
	// past it is cut at the chunk that would pass it, the upstream try
	// aborted and never retried, and the client gets 413 if no response
	// byte went to it yet, else its connection is cut. The access log
	// line ends with body_limit=exceeded.
	Body int64
}

// Static serves files from a directory, for a route (package static):
// the request path after the route's path_prefix names the file under
// Root, as nginx's alias does (/static/ + css/site.css is
// ROOT/css/site.css). GET and HEAD only; no directory listings; files
// and symbolic links out of Root are refused. The access log line of
// each request ends with static=WHAT (hit, gzip, br, partial,
// not_modified, not_found...).
type Static struct {
	// Root (key "root", required) is the directory served. A relative
	// path is relative to the directory of the config file (not to
	// sluice's working directory); it is stored resolved. It must exist
	// and be a directory when the file is loaded.
	Root string
	// Index (key "index", default "index.html") is the file served for
	// a path naming a directory ("/static/docs/"); "" serves none (404).
	// A directory's path without its "/" is redirected (301) to the path
	// with it when the index exists.
	Index string
	// Dotfiles (key "dotfiles", default false) serves files and
	// directories whose names start with "."; by default they get 404
	// (a forgotten .git or .env is not published), except .well-known.
	Dotfiles bool
	// CacheControl (key "cache_control", default "" = none) is the
	// Cache-Control field of the answers with a file (200, 206, 304),
	// such as "max-age=31536000, immutable" for files whose names change
	// with their content (Django's ManifestStaticFilesStorage).
	CacheControl string
	// Line is the line of static in the file, for messages.
	Line int
}

// DefaultStaticIndex is the index file of a static route that names none.
const DefaultStaticIndex = "index.html"

// Compress is a route's response compression (package compress): a
// response of one of Types, of at least MinSize bytes (or of unknown
// length), to a client whose Accept-Encoding accepts one of Algorithms,
// is compressed as it streams through (chunked; Content-Length dropped;
// ETag weakened; Vary: Accept-Encoding). Never a response already
// encoded, a 206, one marked Cache-Control: no-transform (or to a request
// so marked), nor HEAD, 204 and 304 responses. The access log line of a
// compressed response ends with compressed=ALGORITHM.
type Compress struct {
	// Algorithms (key "algorithms", default [zstd, br, gzip]) are the
	// codings offered, in order of preference: among those the client
	// gives the same q-value, the first wins. Each is zstd, br or gzip,
	// once.
	Algorithms []string
	// MinSize (key "min_size", default 1KiB) is the smallest
	// Content-Length compressed; a response of unknown length is
	// compressed whatever its size. 0 compresses any size.
	MinSize int64
	// Types (key "types", default [text/*, application/json,
	// application/javascript, application/xml, image/svg+xml]) are the
	// media types compressed: type/subtype, type/* or */*, matched
	// against Content-Type ignoring case and parameters.
	Types []string
	// Level (key "level", default {zstd: 3, br: 4, gzip: 5}): each
	// algorithm's level in its own scale, zstd 1..22, br 1..11, gzip
	// 1..9; an algorithm left out keeps its default.
	Level CompressLevel
}

// CompressLevel holds a compression level per algorithm; 0 is the
// algorithm's default.
type CompressLevel struct {
	Zstd, Brotli, Gzip int
}

// DefaultCompressMinSize is Compress.MinSize's default.
const DefaultCompressMinSize = 1 << 10

// Upstream is a named group of servers that serve the same content,
// with the timeouts, pooling and retry policy that apply to them.
type Upstream struct {
	// Name is the upstream's key under "upstreams"; it matches
	// [A-Za-z0-9_.-]+.
	Name string
	// Line is the line of the upstream's name in the file, for messages.
	Line int
	// Servers (key "servers", required, at least one).
	Servers []Server
	// Timeouts (key "timeouts"); see DefaultUpstreamTimeouts.
	Timeouts UpstreamTimeouts
	// Pool (key "pool"); see DefaultPool.
	Pool Pool
	// Retry (key "retry"); see DefaultRetry.
	Retry Retry
	// TLS (key "tls", default nil: plain TCP) makes the connections to the
	// servers TLS. The key given, even empty ("tls: {}"), turns it on.
	// Not with a server at a Unix socket: that is an error.
	TLS *UpstreamTLS
	// Host (key "host", default "": the client's Host) replaces the Host
	// header of the requests sent to the servers; a host name, optionally
	// with :port. A request that came without a Host (HTTP/1.0) is sent
	// with the server's address, or "localhost" to a Unix socket.
	Host string
	// Protocol (key "protocol", default "http/1.1") is what the servers
	// are spoken to with: "http/1.1"; "h2", HTTP/2 over TLS (needs tls; a
	// server whose handshake does not choose h2 is a connect failure);
	// "h2c", HTTP/2 in the clear (gRPC servers, most often); or "auto",
	// TLS offering both, the server choosing. Over HTTP/2 the requests of
	// many clients share few connections: another is opened only when the
	// open ones are at their server's SETTINGS_MAX_CONCURRENT_STREAMS;
	// pool.max_idle counts connections, and pool.idle_timeout applies to
	// one with no open stream.
	Protocol string
	// Balance (key "balance", default "p2c") is the selection policy:
	// round_robin, least_request, p2c, random, first or hash.
	Balance string
	// HashKey (key "hash_key", default "client_ip", only with balance:
	// hash) is what requests are hashed on: client_ip, header:NAME,
	// cookie:NAME or uri.
	HashKey string
	// Health (key "health") is the upstream's health checking, held in
	// balance's own form, which Build hands to the upstream's balancer as
	// it is. DefaultHealth returns the defaults. The keys under "health"
	// set these fields, translated where the file means something else:
	//
	//   - passive.max_fails: MaxFails (default 3, >= 0). Failures within
	//     fail_timeout that take a server out for fail_timeout; 0 in the
	//     file turns the rule off and is held as -1, balance's off.
	//   - passive.fail_timeout: FailTimeout (default 10s, > 0).
	//   - passive.statuses: Statuses (default [502, 503, 504]), the
	//     response statuses that count as failures; [] counts none and is
	//     held as an empty slice, never nil. Connect errors, timeouts and
	//     invalid responses always count.
	//   - passive.consecutive_failures: ConsecutiveFailures (default 5,
	//     >= 0). Failures in a row that eject a server; 0 in the file turns
	//     ejection off and is held as -1.
	//   - passive.base_ejection: BaseEjection (default 30s, > 0).
	//   - passive.max_ejection: MaxEjection (default 300s, > 0).
	//   - passive.max_ejected_percent: MaxEjectedPercent (default 50,
	//     1..100).
	//   - active: Active (default nil: no active checks). Its keys set the
	//     ActiveCheck field of the same name, body setting BodyContains:
	//     path (default "/"; starts with "/", no whitespace), method
	//     (default GET; a token, held in upper case), host (default the
	//     server's address; a host, optionally with :port), expect (default
	//     [200]), body (default ""), tcp (default false), interval (default
	//     5s, > 0), timeout (default 1s, > 0), rise (default 2, 1..100),
	//     fall (default 3, 1..100). Every default is held, not left zero.
	//   - slow_start: SlowStart (default 0s: off, >= 0).
	//
	// The file sets nothing else: Parse leaves Resolver, Now, Rand, Log and
	// OnChange nil, and Build gives the balancer slog.Default() as its Log.
	Health balance.Options
}

// Server is one server of an upstream.
type Server struct {
	// Backup (key "backup", default false) servers take requests only
	// when no other server of the upstream is available.
	Backup bool
	// Resolve (key "resolve", default 10s, > 0) is how often a server
	// named by a DNS name is looked up again; each address becomes an
	// endpoint. Ignored for IP addresses and Unix sockets.
	Resolve time.Duration
	// Address (key "address", required) is the host:port to dial. The
	// host may be a DNS name and may not be empty; the port is in
	// 1..65535. Or "unix:" and the absolute path of a Unix domain socket
	// (unix:/run/gunicorn.sock; at most 107 bytes), pooled, retried and
	// health-checked as a TCP server is.
	Address string
	// Weight (key "weight", default 1, 1..1000) is the server's share of
	// requests relative to the other servers of its upstream.
	Weight int
	// Line is the line of the server in the file, for messages.
	Line int
}

// UpstreamTLS is how an upstream's servers are reached over TLS. The
// files are read when the config is built (Build), on start and on each
// reload, not when it is parsed.
type UpstreamTLS struct {
	// ServerName (key "server_name", default "": each server's host, the
	// DNS name for a resolved server) is the name sent as SNI and
	// verified against the servers' certificates. A host name or an IP
	// address, without a port.
	ServerName string
	// CA (key "ca", default "": the system's roots) is a PEM file of the
	// certificates that servers' certificates are verified against,
	// instead of the system's.
	CA string
	// Cert and Key (keys "cert" and "key", default "", both or neither)
	// are PEM files of a client certificate (the chain, leaf first) and
	// its private key, for mutual TLS: presented to every server that
	// asks for one, whatever authorities it names (as nginx does).
	Cert, Key string
	// InsecureSkipVerify (key "insecure_skip_verify", default false)
	// accepts any certificate from the servers: encryption without
	// authentication. Not with CA, which it would ignore.
	InsecureSkipVerify bool
	// Line is the line of the section's value in the file, for messages.
	Line int
}

// UpstreamTimeouts bounds the exchanges with an upstream's servers.
// DefaultUpstreamTimeouts returns the defaults.
type UpstreamTimeouts struct {
	// Connect (key "connect", default 2s, > 0) bounds dialing a server,
	// the TLS handshake included.
	Connect time.Duration
	// ResponseHeader (key "response_header", default 60s, > 0) is the
	// time from the request being fully written (or from a 100 Continue)
	// to the end of the response head.
	ResponseHeader time.Duration
	// Read (key "read", default 60s, > 0) is the longest the response
	// body may go without a byte arriving.
	Read time.Duration
	// Write (key "write", default 60s, > 0) is the longest a single
	// write to the server may block.
	Write time.Duration
}

// DefaultUpstreamTimeouts returns the timeouts an upstream gets when the
// file does not set them, the library's (proxy.PeerOptions): connect 2s,
// response_header 60s, read 60s, write 60s.
func DefaultUpstreamTimeouts() UpstreamTimeouts {
	return UpstreamTimeouts{
		Connect:        proxy.DefaultConnectTimeout,
		ResponseHeader: proxy.DefaultResponseHeaderTimeout,
		Read:           proxy.DefaultReadTimeout,
		Write:          proxy.DefaultWriteTimeout,
	}
}

// Pool configures the idle connections kept to an upstream's servers.
// DefaultPool returns the defaults.
type Pool struct {
	// MaxIdle (key "max_idle", default 32, >= 0) is the number of idle
	// connections kept per server; 0 turns pooling off.
	MaxIdle int
	// IdleTimeout (key "idle_timeout", default 60s, > 0) is how long a
	// pooled connection may stay idle before it is closed.
	IdleTimeout time.Duration
	// MaxRequests (key "max_requests", default 0, >= 0) retires a
	// connection after it has carried this many requests; 0 means no
	// limit besides what the server announces.
	MaxRequests int
	// MaxAge (key "max_age", default 0s, >= 0) retires a connection this
	// long after it was opened; 0 means no limit.
	MaxAge time.Duration
	// NonIdempotent (key "non_idempotent", default "learn") says which
	// connection a request that must not be sent twice takes (a POST,
	// PATCH, ... that the retry policy cannot resend: without the
	// idempotency header under keyed): "dial", always a new one; "reuse",
	// a pooled one idle at most NonIdempotentMaxIdle; "learn", as reuse
	// for a server that has completed 1000 exchanges since it last dropped
	// such a connection and has never been seen recycling its processes
	// (gunicorn's max_requests), as dial otherwise (see pool.Once).
	NonIdempotent string
	// NonIdempotentMaxIdle (key "non_idempotent_max_idle", default 1s,
	// > 0) is the longest such a request's pooled connection may have
	// been idle, below the idle timeouts servers keep without announcing
	// them (gunicorn's 2s).
	NonIdempotentMaxIdle time.Duration
}

// DefaultPool returns the pool settings an upstream gets when the file
// does not set them, the library's (proxy.DefaultPoolLimits): max_idle
// 32, idle_timeout 60s, max_requests 0, max_age 0s, non_idempotent learn,
// non_idempotent_max_idle 1s.
func DefaultPool() Pool {
	return Pool{
		MaxIdle:              proxy.DefaultPoolLimits.MaxIdle,
		IdleTimeout:          proxy.DefaultPoolLimits.IdleTimeout,
		NonIdempotent:        proxy.DefaultPoolLimits.Once.Mode.String(),
		NonIdempotentMaxIdle: pool.DefaultOnceMaxIdle,
	}
}

// Retry conditions, the values Retry.On may hold.
var retryConditions = []string{
	"error", "timeout", "invalid_header",
	"http_500", "http_502", "http_503", "http_504",
	"http_403", "http_404", "http_429",
}

// Retry is an upstream's retry policy. DefaultRetry returns the
// defaults.
type Retry struct {
	// Tries (key "tries", default 3, 1..20) is the total number of
	// attempts, the first included; 1 means no retries. It is forced to
	// 1 when On is empty.
	Tries int
	// On (key "on", default [error, timeout]) lists what makes an
	// attempt worth retrying: "error" (the connection failed or broke),
	// "timeout" (an upstream timeout fired), "invalid_header" (the
	// response head was malformed), or a response status "http_500",
	// "http_502", "http_503", "http_504", "http_403", "http_404",
	// "http_429". Values are matched case-insensitively and stored in
	// lower case, deduplicated, in the order given. [] or [off] means no
	// retries ("off" may not be combined with other values); On is then
	// empty and Tries is 1.
	On []string
	// NonIdempotent (key "non_idempotent", default "keyed") says when a
	// non-idempotent request (POST, PATCH, ...) may be retried: "never";
	// "keyed", only if it carries the IdempotencyHeader; or "always".
	NonIdempotent string
	// IdempotencyHeader (key "idempotency_header", default
	// "Idempotency-Key") is the request header that makes a
	// non-idempotent request retryable under "keyed". It must be a valid
	// HTTP field name (RFC 9110, section 5.1).
	IdempotencyHeader string
	// Timeout (key "timeout", default 60s, >= 0): no try starts later
	// than this after the first one started; 0 means no bound besides
	// Tries. A request takes at most Timeout plus one try. The default is
	// the response_header timeout's, so that a try that timed out waiting
	// for its answer is the answer: a slow request runs once.
	Timeout time.Duration
	// Backoff (key "backoff") is the pause before retrying on the same
	// server.
	Backoff Backoff
	// Budget (key "budget") caps retries relative to requests.
	Budget Budget
	// BodyBuffer (key "body_buffer", default 64KiB, 0..64MiB) is the
	// largest request body kept so that it can be sent again; a request
	// with a larger body is not retried once its body has been sent.
	BodyBuffer int64
}

// Backoff is the pause before retrying on the same server: a random
// duration ("full jitter") between 0 and min(Max, Base·2^(retry-1)).
type Backoff struct {
	// Base (key "base", default 0s, >= 0) is the backoff ceiling of the
	// first retry; 0 means retries to the same server start at once.
	Base time.Duration
	// Max (key "max", default 1s, >= Base) is the largest backoff ceiling.
	Max time.Duration
}

// Budget caps retries so that they cannot multiply the load on a
// failing upstream: retries are allowed while they stay within
// Ratio of requests, plus MinPerSecond.
type Budget struct {
	// Ratio (key "ratio", default 0.2, 0..1) is the share of requests
	// that may be retried.
	Ratio float64
	// MinPerSecond (key "min_per_second", default 10, >= 0) is the number
	// of retries per second allowed regardless of Ratio, so that a
	// quiet upstream can still be retried.
	MinPerSecond float64
}

// DefaultRetry returns the retry policy an upstream gets when the file
// does not set one, the library's (a zero retry.Policy): tries 3, on
// [error, timeout], non_idempotent keyed, idempotency_header
// Idempotency-Key, timeout 60s, backoff {base: 0s, max: 1s}, budget
// {ratio: 0.2, min_per_second: 10}, body_buffer 64KiB. Each call returns a
// new On slice.
func DefaultRetry() Retry {
	return Retry{
		Tries:             retry.DefaultTries,
		On:                strings.Fields(retry.DefaultOn.String()),
		NonIdempotent:     retry.Keyed.String(),
		IdempotencyHeader: retry.DefaultHeader,
		Timeout:           retry.DefaultTimeout,
		Backoff:           Backoff{Max: retry.DefaultBackoffMax},
		Budget:            Budget{Ratio: retry.DefaultBudgetRatio, MinPerSecond: retry.DefaultBudgetPerSecond},
		BodyBuffer:        retry.DefaultBodyBuffer,
	}
}

// defaults returns a Config holding every default; Listen, Routes and
// Upstreams, which have none, are nil.
func defaults() *Config {
	return &Config{
		Timeouts: Timeouts{
			Header: 10 * time.Second,
			Idle:   60 * time.Second,
			Drain:  30 * time.Second,
			Body:   60 * time.Second,
			Send:   60 * time.Second,

			StreamIdle: 5 * time.Minute,
		},
		Limits: Limits{
			MaxHeaderBytes:       64 << 10,
			MaxHeaders:           100,
			MaxIdleUpstreamConns: 1024,
			H2:                   H2Limits{MaxConcurrentStreams: 250, InitialWindow: 1 << 20, MaxHeaderList: 64 << 10},
			H3: H3Limits{MaxConcurrentStreams: 100, MaxHeaderList: 64 << 10, IdleTimeout: 30 * time.Second,
				RetryAbove: 1000, RapidResetPercent: 50},
		},
		AccessLog: AccessLog{Enabled: true, Format: "text", Buffer: 64 << 10, Flush: time.Second},
		Log:       Log{Level: "info", Format: "text"},
		Forwarded: Forwarded{
			XForwardedFor:   true,
			XForwardedProto: true,
			XForwardedHost:  true,
			RequestID:       true,
			Via:             true,
			ClientIP:        "peer",
		},
	}
}

// defaultUpstream returns an upstream holding every default.
func defaultUpstream(name string, line int) *Upstream {
	return &Upstream{
		Name:     name,
		Line:     line,
		Timeouts: DefaultUpstreamTimeouts(),
		Pool:     DefaultPool(),
		Retry:    DefaultRetry(),
		Protocol: "http/1.1",
		Balance:  "p2c",
		HashKey:  "client_ip",
		Health:   DefaultHealth(),
	}
}

// DefaultHealth returns the health settings an upstream gets when the
// file does not set them: passive checks at balance's defaults (max_fails
// 3, fail_timeout 10s, statuses [502, 503, 504], consecutive_failures 5,
// base_ejection 30s, max_ejection 300s, max_ejected_percent 50), each held
// as its value; no active checks; no slow start. Each call returns a new
// Statuses slice.
func DefaultHealth() balance.Options {
	return balance.Options{
		MaxFails:            balance.DefaultMaxFails,
		FailTimeout:         balance.DefaultFailTimeout,
		Statuses:            slices.Clone(balance.DefaultStatuses),
		ConsecutiveFailures: balance.DefaultConsecutiveFailures,
		BaseEjection:        balance.DefaultBaseEjection,
		MaxEjection:         balance.DefaultMaxEjection,
		MaxEjectedPercent:   balance.DefaultMaxEjectedPercent,
	}
}

// defaultActive returns the active checks an "active" key starts from:
// balance's defaults, each held as its value.
func defaultActive() *balance.ActiveCheck {
	return &balance.ActiveCheck{
		Path:     balance.DefaultCheckPath,
		Method:   balance.DefaultCheckMethod,
		Expect:   slices.Clone(balance.DefaultExpect),
		Interval: balance.DefaultCheckInterval,
		Timeout:  balance.DefaultCheckTimeout,
		Rise:     balance.DefaultRise,
		Fall:     balance.DefaultFall,
	}
}
