package route

import (
	"crypto/tls"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// session returns a session whose request is GET target with Host host.
func session(t testing.TB, host, target string) *proxy.Session {
	t.Helper()
	var s proxy.Session
	raw := "GET " + target + " HTTP/1.1\r\n"
	if host != "" {
		raw += "Host: " + host + "\r\n"
	}
	if err := h1.ParseRequest(&s.Request, []byte(raw+"\r\n"), 10); err != nil {
		t.Fatal(err)
	}
	return &s
}

func TestTemplate(t *testing.T) {
	re := regexp.MustCompile(`^/(?P<dir>[a-z]+)/(\d+)?(.*)$`)
	tests := []struct {
		src, target, want string
	}{
		{"/x/$1/$2/$3", "/ab/12c", "/x/ab/12/c"},
		{"/x/$dir-${dir}", "/ab/c", "/x/ab-ab"},
		{"/$2/", "/ab/c", "//"}, // a group that took no part is empty
		{"$0", "/ab/c", "/ab/c"},
		{"/$10", "/ab/c", "/ab0"}, // $1 and a 0
		{"/${3}", "/ab/12c", "/c"},
		{"https://$host$request_uri", "/ab/c?q=1", "https://example.com/ab/c?q=1"},
		{"$scheme://${host}:8443$uri$is_args$args", "/ab/c?q=1&r", "http://example.com:8443/ab/c?q=1&r"},
		{"$uri$is_args$args", "/ab/c", "/ab/c"},
		{"/cost/$$5/${uri}_x", "/ab/c", "/cost/$5//ab/c_x"},
	}
	for _, tt := range tests {
		tpl, err := ParseTemplate(tt.src, re)
		if err != nil {
			t.Errorf("ParseTemplate(%q): %v", tt.src, err)
			continue
		}
		s := session(t, "Example.COM.:8080", tt.target)
		path, _, _ := strings.Cut(tt.target, "?")
		m := re.FindSubmatchIndex([]byte(path))
		if got := string(tpl.Append(nil, s, []byte(path), m)); got != tt.want {
			t.Errorf("%q on %s: %q, want %q", tt.src, tt.target, got, tt.want)
		}
		if tpl.String() != tt.src {
			t.Errorf("String() = %q, want %q", tpl.String(), tt.src)
		}
	}
	tpl, _ := ParseTemplate("$scheme", nil)
	s := session(t, "h", "/")
	s.TLS = &tls.ConnectionState{}
	if got := string(tpl.Append(nil, s, nil, nil)); got != "https" {
		t.Errorf("$scheme over TLS: %q", got)
	}
	// No Host (HTTP/1.0): empty.
	tpl, _ = ParseTemplate("[$host]", nil)
	if got := string(tpl.Append(nil, session(t, "", "/"), nil, nil)); got != "[]" {
		t.Errorf("$host without Host: %q", got)
	}
	if lit, _ := ParseTemplate("/a$$b", nil); !lit.Literal() || !lit.StartsWith("/a") {
		t.Error("/a$$b is a literal starting with /a")
	}
	if ref, _ := ParseTemplate("$uri/x", nil); ref.Literal() || ref.StartsWith("/") {
		t.Error("$uri/x refers to the request, and need not start with /")
	}
}

func TestTemplateErrors(t *testing.T) {
	re := regexp.MustCompile(`^/(a)(?P<name>b)?`)
	tests := []struct {
		src string
		re  *regexp.Regexp
		msg string
	}{
		{"/$3", re, "at 1: $3 refers to capture 3, and the expression \"^/(a)(?P<name>b)?\" has 2"},
		{"/$1", nil, "no regular expression"},
		{"/$", re, "at 1: a $ ends the text"},
		{"/${1", re, "${ without its }"},
		{"/${}", re, "${}: a name is letters"},
		{"/${a-b}", re, "${a-b}"},
		{"/${01}", re, "not a capture"},
		{"/${12345}", re, "not a capture"},
		{"/$-", re, "$-: a $ starts"},
		{"/$hostname", re, "$hostname is neither a capture of the expression nor a variable (host, scheme, request_uri, uri, args, is_args) (for $host followed by \"name\", write ${host}name)"},
		{"/${nope}", re, "$nope is neither"},
		{"/a b", re, "at 2: ' ': only visible ASCII"},
		{"/a\x7f", re, "at 2"},
		{"/é", re, "at 1"},
	}
	for _, tt := range tests {
		_, err := ParseTemplate(tt.src, tt.re)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ParseTemplate(%q): %v, want ...%s...", tt.src, err, tt.msg)
		}
	}
}

// FuzzParseTemplate checks that ParseTemplate never panics, that what it
// accepts it gives back as its String, and that expanding it never panics,
// starts as StartsWith says, and writes nothing but visible ASCII when the
// request's path and host are.
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"/new/$1", "/$name/${2}x", "https://$host$request_uri", "$$", "$", "${", "${1", "${01}", "$uri$is_args$args", "/a b", "$9", "${99}", "/é", "$_x", "${host}"} {
		f.Add(s, "/ab/cd?x=1")
	}
	re := regexp.MustCompile(`^/(?P<name>[a-z]*)/(c)?(.*)`)
	f.Fuzz(func(t *testing.T, src, target string) {
		tpl, err := ParseTemplate(src, re)
		if err != nil {
			return
		}
		if tpl.String() != src {
			t.Fatalf("String() = %q, want %q", tpl.String(), src)
		}
		if !strings.HasPrefix(target, "/") || strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			target = "/ab/cd"
		}
		s := session(t, "example.com", target)
		path, _, _ := strings.Cut(target, "?")
		out := tpl.Append(nil, s, []byte(path), re.FindSubmatchIndex([]byte(path)))
		for _, c := range out {
			if c <= ' ' || c >= 0x7f {
				t.Fatalf("%q expands to %q", src, out)
			}
		}
		if tpl.StartsWith("/") && (len(out) == 0 || out[0] != '/') {
			t.Fatalf("%q starts with / but expands to %q", src, out)
		}
	})
}
