package accesslog

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// record is an access log record as the proxy writes one (Session's
// logAccess), with a note a phase added.
func record() slog.Record {
	r := slog.NewRecord(time.Date(2026, 3, 4, 5, 6, 7, 891_000_000, time.FixedZone("", 3600)), slog.LevelInfo, "request", 0)
	r.AddAttrs(
		slog.String("client", "192.0.2.7"),
		slog.String("method", "GET"),
		slog.String("host", "app.example"),
		slog.String("target", "/search?q=a%20b"),
		slog.Int("status", 200),
		slog.Int64("bytes_in", 0),
		slog.Int64("bytes_out", 1234),
		slog.String("duration", "0.004213"),
		slog.String("protocol", "HTTP/1.1"),
		slog.String("request_id", "0123456789abcdef0123456789abcdef"),
		slog.String("route", "*/"),
		slog.String("upstream_name", "web"),
		slog.String("upstream", "10.0.0.1:8080, 10.0.0.2:8080"),
		slog.String("upstream_status", "connection_closed, 200"),
		slog.Bool("reused", true),
		slog.Int("tries", 2),
		slog.String("tls", "1.3"),
		slog.String("sni", "app.example"),
		slog.String("user_agent", `curl/8 "quoted" \ ünïcode`+"\x01"),
		slog.String("referer", ""),
		slog.String("static", "hit"),
	)
	return r
}

func line(t *testing.T, format string, r slog.Record) string {
	t.Helper()
	f, err := Parse(format)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := NewHandler(&buf, f, nil).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestHandler(t *testing.T) {
	tests := []struct{ format, want string }{
		{"$client $method $target $status $duration", "192.0.2.7 GET /search?q=a%20b 200 0.004213"},
		// nginx's names for the same values.
		{"$remote_addr $request_method $request_uri $server_protocol $bytes_sent $request_time $http_host",
			"192.0.2.7 GET /search?q=a%20b HTTP/1.1 1234 0.004213 app.example"},
		{`"$request" $upstream_addr $upstream_status $upstream_name $tries $reused`,
			`"GET /search?q=a%20b HTTP/1.1" 10.0.0.1:8080, 10.0.0.2:8080 connection_closed, 200 web 2 true`},
		// Absent or empty: "-". The peer is the client when the record has none.
		{"$error $aborted $referer $http_referer $compressed $peer $realip_remote_addr", "- - - - - 192.0.2.7 192.0.2.7"},
		{"$static $tls $ssl_server_name $request_id $route $bytes_in", "hit 1.3 app.example 0123456789abcdef0123456789abcdef */ 0"},
		// Text from the request is escaped: a line stays one line, its quotes its own.
		{`"$http_user_agent"`, `"curl/8 \x22quoted\x22 \x5C \xC3\xBCn\xC3\xAFcode\x01"`},
		// The record's own.
		{"$time|$time_iso8601|$time_local|$msec|$level|$msg",
			"2026-03-04T05:06:07.891+01:00|2026-03-04T05:06:07+01:00|04/Mar/2026:05:06:07 +0100|1772597167.891|INFO|request"},
		{"${status}s $$ 100%", "200s $ 100%"},
	}
	for _, tt := range tests {
		if got := line(t, tt.format, record()); got != tt.want+"\n" {
			t.Errorf("%s:\n got %q\nwant %q", tt.format, got, tt.want+"\n")
		}
	}

	combined, _ := Named("combined")
	want := `192.0.2.7 - - [04/Mar/2026:05:06:07 +0100] "GET /search?q=a%20b HTTP/1.1" 200 1234 "-" "curl/8 \x22quoted\x22 \x5C \xC3\xBCn\xC3\xAFcode\x01"` + "\n"
	if got := line(t, combined, record()); got != want {
		t.Errorf("combined:\n got %q\nwant %q", got, want)
	}

	// A head that did not parse has no method: no request line.
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
	r.AddAttrs(slog.String("client", "192.0.2.7"), slog.Int("status", 400), slog.String("peer", "10.0.0.9"))
	if got := line(t, `$peer "$request" $status $client`, r); got != "10.0.0.9 \"-\" 400 192.0.2.7\n" {
		t.Errorf("bad request: %q", got)
	}
}

func TestHandlerLevelsAndGroups(t *testing.T) {
	f, _ := Parse("$client $status")
	var buf bytes.Buffer
	h := NewHandler(&buf, f, slog.LevelInfo)
	if h.Enabled(context.Background(), slog.LevelDebug) || !h.Enabled(context.Background(), slog.LevelInfo) {
		t.Error("Enabled does not follow the level")
	}
	l := slog.New(h).With("client", "192.0.2.1")
	l.Info("request", "status", 204)
	l.Info("request", "status", 200, "client", "192.0.2.2") // the record's own wins
	l.WithGroup("g").Info("request", "status", 500)         // in a group: no field
	want := "192.0.2.1 204\n192.0.2.2 200\n192.0.2.1 -\n"
	if buf.String() != want {
		t.Errorf("lines %q, want %q", buf.String(), want)
	}
}

// TestHandlerAllocations: writing a line allocates nothing of its own.
func TestHandlerAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	combined, _ := Named("combined")
	f, err := Parse(combined + " $upstream $upstream_status $duration $tries $reused $static $msec $time")
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(discard{}, f, nil)
	r := record()
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { h.Handle(ctx, r) }); n > 0 {
		t.Errorf("%v allocations per line, want 0", n)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestNotesAreFields: every note a phase of this module adds
// (Session.Note) is a field, so that a format can name each.
func TestNotesAreFields(t *testing.T) {
	note := regexp.MustCompile(`\.Note\("([^"]+)"`)
	found := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range note.FindAllSubmatch(src, -1) {
			found++
			if _, ok := names[string(m[1])]; !ok {
				t.Errorf("%s notes %q, which is no access log field: add it to accesslog's fields", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 7 {
		t.Errorf("found %d notes in the module, want at least the 7 known: is the walk looking in the right place?", found)
	}
}

// TestRecordKeysAreFields: every attribute the proxy's access log record
// has (Session.logAccess, which the JSON and text lines show) is a field.
func TestRecordKeysAreFields(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "proxy", "answer.go"))
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(src, []byte("func (s *Session) logAccess()"))
	if start < 0 {
		t.Fatal("proxy/answer.go has no Session.logAccess: point this test at where the access log record is made")
	}
	body := src[start:]
	if end := bytes.Index(body, []byte("\n}\n")); end > 0 {
		body = body[:end]
	}
	attr := regexp.MustCompile(`slog\.\w+\("([a-z_]+)"`)
	found := 0
	for _, m := range attr.FindAllSubmatch(body, -1) {
		found++
		if _, ok := names[string(m[1])]; !ok {
			t.Errorf("the access log record has %q, which is no field: add it to accesslog's fields", m[1])
		}
	}
	if found < 20 {
		t.Errorf("found %d attributes in logAccess, want the 20 and more it has", found)
	}
}

// BenchmarkHandle writes nginx's combined line, beside slog's text and
// JSON handlers writing the same record.
func BenchmarkHandle(b *testing.B) {
	combined, _ := Named("combined")
	f, _ := Parse(combined)
	r := record()
	ctx := context.Background()
	for _, h := range []struct {
		name string
		h    slog.Handler
	}{
		{"combined", NewHandler(discard{}, f, nil)},
		{"slog_text", slog.NewTextHandler(discard{}, nil)},
		{"slog_json", slog.NewJSONHandler(discard{}, nil)},
	} {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				h.h.Handle(ctx, r)
			}
		})
	}
}
