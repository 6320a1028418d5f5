package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
)

func TestParseKeyValue(t *testing.T) {
	tests := []struct {
		in   string
		want string // the key; "" means refused
		err  error
	}{
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{`"8e03978e-40d5"`, "8e03978e-40d5", nil},
		{"a", "a", nil},
		{"with space inside", "with space inside", nil},
		{"~!@#$%^&*()_+{}|:<>?`-=[]\\;',./", "~!@#$%^&*()_+{}|:<>?`-=[]\\;',./", nil},
		{`"a \"quoted\" \\ key"`, `a "quoted" \ key`, nil},
		{`"\\"`, `\`, nil},
		{strings.Repeat("k", 255), strings.Repeat("k", 255), nil},
		{`"` + strings.Repeat("k", 255) + `"`, strings.Repeat("k", 255), nil},
		{`"` + strings.Repeat("k", 254) + `\""`, strings.Repeat("k", 254) + `"`, nil},
		{"", "", errKeyEmpty},
		{`""`, "", errKeyEmpty},
		{strings.Repeat("k", 256), "", errKeyLong},
		{`"` + strings.Repeat("k", 256) + `"`, "", errKeyLong},
		{`"` + strings.Repeat("k", 255) + `\""`, "", errKeyLong},
		{"tab\there", "", errKeyByte},
		{"nul\x00", "", errKeyByte},
		{"del\x7f", "", errKeyByte},
		{"caf\xc3\xa9", "", errKeyByte},
		{`"unterminated`, "", errKeyString},
		{`"trailing" x`, "", errKeyString},
		{`"bad \n escape"`, "", errKeyString},
		{`"ends with \"`, "", errKeyString},
		{`"a"b"`, "", errKeyString},
		{"\"caf\xc3\xa9\"", "", errKeyByte},
		{`"`, "", errKeyString},
		{`"\`, "", errKeyString},
	}
	for _, tt := range tests {
		got, err := ParseKeyValue([]byte(tt.in))
		if err != tt.err || string(got) != tt.want {
			t.Errorf("ParseKeyValue(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestKeyField(t *testing.T) {
	var h h1.Header
	h.Add("Host", "a.test")
	if _, err := keyField(&h, "Idempotency-Key", -1); err != errKeyNotFound {
		t.Errorf("no field: %v, want errKeyNotFound", err)
	}
	h.Add("idempotency-KEY", "k1")
	// at is the field's index when the caller knows it (the phase's), or
	// -1; either way, the same.
	for _, at := range []int{-1, 1} {
		if k, err := keyField(&h, "Idempotency-Key", at); err != nil || string(k) != "k1" {
			t.Errorf("one field, another case, at %d: %q, %v", at, k, err)
		}
	}
	h.Add("Idempotency-Key", "k1")
	for _, at := range []int{-1, 1} {
		if _, err := keyField(&h, "Idempotency-Key", at); err != errKeyTwice {
			t.Errorf("two fields, at %d: %v, want errKeyTwice", at, err)
		}
	}
}

func TestParseScope(t *testing.T) {
	tests := []struct {
		in, want string // want "" means refused
	}{
		{"route", "route"},
		{"client_ip", "client_ip"},
		{"header:Authorization", "header:Authorization"},
		{"header:X-Api-Key", "header:X-Api-Key"},
		{"header:", ""},
		{"header:Bad Name", ""},
		{"header:a:b", ""},
		{"Route", ""},
		{"client-ip", ""},
		{"cookie:session", ""},
		{"", ""},
	}
	for _, tt := range tests {
		s, err := ParseScope(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("ParseScope(%q) = %v, want an error", tt.in, s)
			}
			continue
		}
		if err != nil || s.String() != tt.want {
			t.Errorf("ParseScope(%q) = %v, %v; want %s", tt.in, s, err, tt.want)
		}
	}
}

// TestMakeKey checks that keys differ when their key or scope values do,
// and only then.
func TestMakeKey(t *testing.T) {
	hdr := func(kv ...string) *h1.Header {
		var h h1.Header
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return &h
	}
	ip := netip.MustParseAddr
	all := []Scope{ScopeRoute, ScopeClientIP, ScopeHeader("Authorization")}
	base := makeKey(all, "*/api/", ip("192.0.2.1"), hdr("Authorization", "Bearer a"), []byte("k"))
	tests := []struct {
		name   string
		scopes []Scope
		route  string
		client netip.Addr
		h      *h1.Header
		key    string
		same   bool
	}{
		{"the same", all, "*/api/", ip("192.0.2.1"), hdr("Authorization", "Bearer a"), "k", true},
		{"the header's name in another case", all, "*/api/", ip("192.0.2.1"), hdr("authorization", "Bearer a"), "k", true},
		{"an IPv4-mapped address", all, "*/api/", ip("::ffff:192.0.2.1"), hdr("Authorization", "Bearer a"), "k", true},
		{"another key", all, "*/api/", ip("192.0.2.1"), hdr("Authorization", "Bearer a"), "k2", false},
		{"another route", all, "*/v2/", ip("192.0.2.1"), hdr("Authorization", "Bearer a"), "k", false},
		{"another client", all, "*/api/", ip("192.0.2.2"), hdr("Authorization", "Bearer a"), "k", false},
		{"another credential", all, "*/api/", ip("192.0.2.1"), hdr("Authorization", "Bearer b"), "k", false},
		{"no credential", all, "*/api/", ip("192.0.2.1"), hdr(), "k", false},
		{"two credentials", all, "*/api/", ip("192.0.2.1"), hdr("Authorization", "Bearer a", "Authorization", "Bearer a"), "k", false},
		{"fewer scopes", all[:2], "*/api/", ip("192.0.2.1"), hdr("Authorization", "Bearer a"), "k", false},
		{"scopes in another order", []Scope{ScopeClientIP, ScopeRoute, ScopeHeader("Authorization")}, "*/api/", ip("192.0.2.1"), hdr("Authorization", "Bearer a"), "k", false},
		// The route's name and the key cannot run into each other.
		{"a route that ends as the key starts", all, "*/api/k", ip("192.0.2.1"), hdr("Authorization", "Bearer a"), "", false},
	}
	for _, tt := range tests {
		got := makeKey(tt.scopes, tt.route, tt.client, tt.h, []byte(tt.key))
		if (got == base) != tt.same {
			t.Errorf("%s: same key %v, want %v", tt.name, got == base, tt.same)
		}
	}
	// IPv6 clients are scoped by their /64.
	a := makeKey([]Scope{ScopeClientIP}, "", ip("2001:db8:1:2:aaaa::1"), hdr(), []byte("k"))
	b := makeKey([]Scope{ScopeClientIP}, "", ip("2001:db8:1:2:bbbb::9"), hdr(), []byte("k"))
	c := makeKey([]Scope{ScopeClientIP}, "", ip("2001:db8:1:3::1"), hdr(), []byte("k"))
	if a != b || a == c {
		t.Errorf("IPv6: same /64 equal %v (want true), another /64 equal %v (want false)", a == b, a == c)
	}
	// Long scope values do not overflow anything: a 64 KiB header.
	long := makeKey(all, strings.Repeat("r", 1000), ip("192.0.2.1"), hdr("Authorization", strings.Repeat("x", 64<<10)), []byte(strings.Repeat("k", 255)))
	if long == base {
		t.Error("a long scope made the base key")
	}
}

func TestFingerprint(t *testing.T) {
	req := func(method, host, target, body string) *Request {
		var h h1.Header
		if host != "" {
			h.Add("Host", host)
		}
		var d *BodyDigest
		if body != "" {
			d = new(BodyDigest)
			d.Write([]byte(body))
		}
		return &Request{Method: method, Target: []byte(target), Header: &h, Body: d}
	}
	whole := func(r *Request, body string) *Request {
		r.body = []byte(body)
		return r
	}
	base := fingerprint(req("POST", "api.example.com", "/orders", `{"n":1}`))
	tests := []struct {
		name string
		r    *Request
		same bool
	}{
		{"the same", req("POST", "api.example.com", "/orders", `{"n":1}`), true},
		{"the host in another case", req("POST", "API.Example.com", "/orders", `{"n":1}`), true},
		{"another method", req("PATCH", "api.example.com", "/orders", `{"n":1}`), false},
		{"another host", req("POST", "api2.example.com", "/orders", `{"n":1}`), false},
		{"another target", req("POST", "api.example.com", "/orders?x=1", `{"n":1}`), false},
		{"another body", req("POST", "api.example.com", "/orders", `{"n":2}`), false},
		{"no body", req("POST", "api.example.com", "/orders", ""), false},
		{"the body whole, as the phase gives it", whole(req("POST", "api.example.com", "/orders", ""), `{"n":1}`), true},
		{"another body whole", whole(req("POST", "api.example.com", "/orders", ""), `{"n":2}`), false},
	}
	for _, tt := range tests {
		if got := fingerprint(tt.r); (got == base) != tt.same {
			t.Errorf("%s: same fingerprint %v, want %v", tt.name, got == base, tt.same)
		}
	}
}

func TestBodyDigest(t *testing.T) {
	var zero BodyDigest
	var none *BodyDigest
	if zero.Sum() != sha256.Sum256(nil) || none.Sum() != sha256.Sum256(nil) {
		t.Error("an unwritten or nil digest is not the empty body's")
	}
	var d BodyDigest
	for _, p := range []string{"hello", ", ", "world"} {
		d.Write([]byte(p))
	}
	if d.Sum() != sha256.Sum256([]byte("hello, world")) || d.Len() != 12 {
		t.Errorf("pieces digest to %x (%d bytes), not the whole's", d.Sum(), d.Len())
	}
}

func TestParseStatuses(t *testing.T) {
	s, err := ParseStatuses([]string{"408", "5xx", "4XX"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		status int
		in     bool
	}{{408, true}, {400, true}, {499, true}, {500, true}, {599, true}, {200, false}, {399, false}, {600, false}, {99, false}} {
		if s.Has(c.status) != c.in {
			t.Errorf("Has(%d) = %v", c.status, !c.in)
		}
	}
	for _, bad := range []string{"600", "99", "6xx", "0xx", "5x", "abc", "", "+200", "0200", "20"} {
		if _, err := ParseStatuses([]string{bad}); err == nil {
			t.Errorf("ParseStatuses(%q) took it", bad)
		}
	}
	d := DefaultRelease()
	for _, c := range []struct {
		status int
		in     bool
	}{{408, true}, {425, true}, {429, true}, {500, true}, {503, true}, {599, true}, {200, false}, {201, false}, {400, false}, {404, false}, {409, false}, {422, false}} {
		if d.Has(c.status) != c.in {
			t.Errorf("DefaultRelease().Has(%d) = %v", c.status, !c.in)
		}
	}
}

// TestDigestsStable pins a key's and a fingerprint's digests to the
// values sluice has always computed for them: a fleet shares records in
// Redis across versions, and a key computed another way would miss its
// record (the retry processed a second time), a fingerprint computed
// another way would answer the retry 422. A change here needs a new
// keyVersion or fingerprintVersion, and thought.
func TestDigestsStable(t *testing.T) {
	var h h1.Header
	h.Add("Host", "API.Example.com")
	h.Add("Idempotency-Key", `"order-42"`)
	h.Add("Authorization", "Bearer abc")
	r := &Request{Method: "POST", Target: []byte("/v1/orders?x=1"), Header: &h,
		ClientIP: netip.MustParseAddr("2001:db8::1"), body: []byte(`{"n":1}`)}
	fp := fingerprint(r)
	if got, want := hex.EncodeToString(fp[:]), "50b1b92a9c1c0a966f76ee9619fef7693f414df396a994c689fcf44653d7f17a"; got != want {
		t.Errorf("fingerprint %s, want %s", got, want)
	}
	d := new(BodyDigest)
	d.Write([]byte(`{"n":1}`))
	r.body, r.Body = nil, d
	if fp2 := fingerprint(r); fp2 != fp {
		t.Errorf("fingerprint with a BodyDigest %x, want %x", fp2, fp)
	}
	k := makeKey([]Scope{ScopeRoute, ScopeClientIP, ScopeHeader("Authorization")}, "*/api/", r.ClientIP, &h, []byte("order-42"))
	if got, want := k.String(), "99f22f464e441070157e1db92b5d2b4d5fd4c8e6174f273be6898b47a8c60ffa"; got != want {
		t.Errorf("key %s, want %s", got, want)
	}
}
