package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// compressFile is a config whose one route has the compress mapping c
// (YAML flow style), on line 5.
func compressFile(c string) string {
	return "listen: [{address: \"127.0.0.1:8080\"}]\nupstreams:\n  web: {servers: [{address: \"127.0.0.1:9001\"}]}\nroutes:\n  - {upstream: web, compress: " + c + "}\n"
}

func TestParseCompress(t *testing.T) {
	tests := []struct {
		yaml string
		want Compress
	}{
		{"{}", Compress{MinSize: DefaultCompressMinSize}},
		{"{algorithms: [gzip, zstd], min_size: 0, types: [Text/*, application/json], level: {gzip: 9, zstd: 19}}",
			Compress{Algorithms: []string{"gzip", "zstd"}, Types: []string{"text/*", "application/json"},
				Level: CompressLevel{Gzip: 9, Zstd: 19}}},
		{"{min_size: 64KiB, level: {br: 11}}", Compress{MinSize: 64 << 10, Level: CompressLevel{Brotli: 11}}},
	}
	for _, tt := range tests {
		c, err := Parse("t.yaml", []byte(compressFile(tt.yaml)))
		if err != nil {
			t.Errorf("%s: %v", tt.yaml, err)
			continue
		}
		if got := c.Routes[0].Compress; got == nil || !reflect.DeepEqual(*got, tt.want) {
			t.Errorf("%s: got %+v, want %+v", tt.yaml, got, tt.want)
		}
	}
	c, err := Parse("t.yaml", []byte(minimal))
	if err != nil || c.Routes[0].Compress != nil {
		t.Errorf("a route without compress: %+v, %v; want nil (off)", c.Routes[0].Compress, err)
	}
}

// TestParseCompressProblem checks that each mistake in a compress mapping
// is reported at its line and column.
func TestParseCompressProblem(t *testing.T) {
	tests := []struct {
		compress  string
		at        string // where in compress the problem is
		path, msg string
	}{
		{"{algorithms: [zstd, deflate]}", "deflate", "routes[0].compress.algorithms[1]", `unknown value "deflate"`},
		{"{algorithms: [gzipp]}", "gzipp", "routes[0].compress.algorithms[0]", `did you mean "gzip"?`},
		{"{algorithms: [gzip, gzip]}", "gzip]", "routes[0].compress.algorithms[1]", "gzip is listed twice"},
		{"{algorithms: []}", "[]", "routes[0].compress.algorithms", "at least one algorithm"},
		{"{types: [text]}", "text", "routes[0].compress.types[0]", "want type/subtype"},
		{"{types: [\"*/json\"]}", "\"*/json", "routes[0].compress.types[0]", "a wildcard type needs a wildcard subtype"},
		{"{types: [\"text/ html\"]}", "\"text", "routes[0].compress.types[0]", "not a subtype name"},
		{"{types: []}", "[]", "routes[0].compress.types", "at least one media type"},
		{"{min_size: 1KB}", "1KB", "routes[0].compress.min_size", "decimal unit"},
		{"{min_size: -1}", "-1", "routes[0].compress.min_size", "must be between"},
		{"{min_size: 2GiB}", "2GiB", "routes[0].compress.min_size", "must be between"},
		{"{level: {gzip: 10}}", "10", "routes[0].compress.level.gzip", "must be between 1 and 9"},
		{"{level: {br: 0}}", "0", "routes[0].compress.level.br", "must be between 1 and 11"},
		{"{level: {zstd: 23}}", "23", "routes[0].compress.level.zstd", "must be between 1 and 22"},
		{"{level: {deflate: 1}}", "deflate", "routes[0].compress.level.deflate", "unknown key"},
		{"{level: 5}", "5", "routes[0].compress.level", "must be a mapping"},
		{"{algorithm: [gzip]}", "algorithm", "routes[0].compress.algorithm", `did you mean "algorithms"?`},
		{"true", "true", "routes[0].compress", "must be a mapping"},
	}
	for _, tt := range tests {
		_, err := Parse("t.yaml", []byte(compressFile(tt.compress)))
		var e *Error
		if !errors.As(err, &e) || len(e.Problems) != 1 {
			t.Errorf("%s: got %v, want one problem", tt.compress, err)
			continue
		}
		p := e.Problems[0]
		col := len("  - {upstream: web, compress: ") + strings.Index(tt.compress, tt.at) + 1
		if p.Line != 5 || p.Column != col || p.Path != tt.path || !strings.Contains(p.Msg, tt.msg) {
			t.Errorf("%s: got %#v\nwant line 5, column %d, path %q, message containing %q", tt.compress, p, col, tt.path, tt.msg)
		}
	}
}
