package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-proxy/sluice/config"
	"github.com/sluice-proxy/sluice/proxy"
)

// SluiceConfig returns a sluice config file for the scenarios here: one
// route to one upstream at addr, default retry policy (non_idempotent:
// keyed), pool max_idle 32, no access log, the error log at warn so that
// every failed try shows, and the clients on 127.0.0.1 trusted, so that
// the X-Request-Id of each request reaches the upstream as they sent it. Each of pool, such as "non_idempotent: dial",
// is added to the upstream's pool section. The listen address is a
// placeholder: StartSluice listens itself.
func SluiceConfig(addr string, pool ...string) string {
	return fmt.Sprintf(`listen:
  - address: 127.0.0.1:0
access_log: {enabled: false}
log: {level: warn, format: json}
forwarded: {trusted: [127.0.0.1/32]}  # the clients' X-Request-Id reach the upstream
routes:
  - upstream: app
upstreams:
  app:
    servers:
      - address: %s
    pool: {%s}
`, addr, strings.Join(append([]string{"max_idle: 32"}, pool...), ", "))
}

// Sluice is a sluice proxy serving in this process, its error log kept in
// memory.
type Sluice struct {
	// Addr is where it listens, "127.0.0.1:port".
	Addr string
	// Server is the proxy; its Pool's Stats say what the pool did.
	Server *proxy.Server

	log    lockedBuffer
	closer io.Closer
	served chan error
	once   sync.Once
}

// StartSluice parses and builds yaml (a sluice config file), and serves it
// on 127.0.0.1:0 (HTTP/1.1, and HTTP/2 to clients that open with its
// preface), whatever its listen section says. Its error log is
// written as JSON to memory (see Log) and, when tee is not nil, to tee.
// Close must be called.
func StartSluice(yaml string, tee io.Writer) (*Sluice, error) {
	cfg, err := config.Parse("e2e.yaml", []byte(yaml))
	if err != nil {
		return nil, err
	}
	gen, err := config.Build(cfg)
	if err != nil {
		return nil, err
	}
	s := &Sluice{served: make(chan error, 1)}
	var w io.Writer = &s.log
	if tee != nil {
		w = io.MultiWriter(&s.log, tee)
	}
	log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: config.Level(cfg.Log.Level)}))
	srv, closer, err := config.NewServer(cfg, gen, log)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Pool.Close()
		closer.Close()
		return nil, err
	}
	s.Addr, s.Server, s.closer = ln.Addr().String(), srv, closer
	go func() { s.served <- srv.ServeWith(ln, proxy.ListenerOptions{Protocols: []string{"http/1.1", "h2c"}}) }()
	return s, nil
}

// Close shuts the proxy down (in-flight requests get 10 s), closes its pool
// and reports a Serve failure other than the shutdown. It may be called
// more than once.
func (s *Sluice) Close() error {
	var err error
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = s.Server.Shutdown(ctx)
		if serr := <-s.served; serr != proxy.ErrServerClosed {
			err = serr
		}
		s.Server.Pool.Close()
		s.closer.Close()
	})
	return err
}

// LogLine is one line of sluice's error log, the fields sluice writes for
// a failed try (proxy/answer.go, logf).
type LogLine struct {
	Level    string `json:"level"`
	Msg      string `json:"msg"`
	Method   string `json:"method"`
	Target   string `json:"target"`
	Try      int    `json:"try"`
	Peer     string `json:"peer"`
	Reused   bool   `json:"reused"`
	IdleNS   int64  `json:"idle"`
	Served   int    `json:"served"`
	Stale    bool   `json:"stale_resend"`
	Wrote    int64  `json:"wrote"`
	Read     int64  `json:"read"`
	Error    string `json:"error"`
	Decision string `json:"decision"`
	// Raw is the line as written.
	Raw string `json:"-"`
}

// Idle is how long the try's connection had been idle in the pool.
func (l *LogLine) Idle() time.Duration { return time.Duration(l.IdleNS) }

// ID returns the request id in the line's target (/items/ID), or "".
func (l *LogLine) ID() string {
	id, ok := strings.CutPrefix(l.Target, "/items/")
	if !ok {
		return ""
	}
	return id
}

// Log returns the error log lines written so far.
func (s *Sluice) Log() []LogLine {
	var lines []LogLine
	for raw := range strings.Lines(s.log.String()) {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		var l LogLine
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			l.Msg = "unparsed: " + err.Error()
		}
		l.Raw = raw
		lines = append(lines, l)
	}
	return lines
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Kind returns the fault kind the line's error names ("connection_reset"),
// or "".
func (l *LogLine) Kind() string {
	head, _, _ := strings.Cut(l.Error, ": ")
	_, kind, _ := strings.Cut(head, " ")
	return kind
}

// TrySummary counts the failed-try lines of log by what followed (retried
// or gave up), method, error kind and connection (reused or fresh), as
// sorted lines "gave up POST connection_reset reused: 2". Other lines are
// counted by message.
func TrySummary(log []LogLine) []string {
	counts := make(map[string]int)
	for i := range log {
		l := &log[i]
		var key string
		switch l.Msg {
		case "upstream try failed; retrying":
			key = "retried"
		case "upstream try failed; giving up":
			key = "gave up"
		default:
			counts[l.Level+" "+l.Msg]++
			continue
		}
		conn := "fresh"
		if l.Reused {
			conn = "reused"
		}
		counts[key+" "+l.Method+" "+l.Kind()+" "+conn]++
	}
	out := make([]string, 0, len(counts))
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%s: %d", k, n))
	}
	slices.Sort(out)
	return out
}
