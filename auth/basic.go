package auth

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strconv"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// DefaultRealm is the realm a Basic phase names when it has none.
const DefaultRealm = "restricted"

// Basic is a route phase that lets through only the requests whose
// Authorization field carries the user name and password of one of Users
// (HTTP basic authentication, RFC 7617). Any other request is answered
// 401 with WWW-Authenticate: Basic realm="REALM", charset="UTF-8" and
// Proxy-Status error=http_request_denied (a gRPC call gets
// UNAUTHENTICATED), and nothing goes upstream. The access log line of a
// request let through ends with user=NAME, of one refused with
// basic_auth=missing (no credentials) or basic_auth=denied.
//
// The Authorization field is not sent upstream unless Forward is set: the
// upstream has no use for the password. A Basic is made by NewBasic,
// read-only, and safe for concurrent use.
type Basic struct {
	users     *Users
	forward   bool
	challenge string // the WWW-Authenticate value
}

// NewBasic returns the phase checking requests against users, naming
// realm (DefaultRealm when ""; printable ASCII without '"' or '\') in its
// challenge; with forward, the Authorization field goes upstream.
func NewBasic(users *Users, realm string, forward bool) (*Basic, error) {
	if users == nil {
		return nil, errors.New("basic_auth: no users")
	}
	if realm == "" {
		realm = DefaultRealm
	}
	if err := CheckRealm(realm); err != nil {
		return nil, err
	}
	return &Basic{users: users, forward: forward,
		challenge: `Basic realm="` + realm + `", charset="UTF-8"`}, nil
}

// CheckRealm reports why realm cannot be written in a challenge's quoted
// string, or nil.
func CheckRealm(realm string) error {
	for i := 0; i < len(realm); i++ {
		if c := realm[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return errors.New("basic_auth: the realm holds " + strconv.QuoteRune(rune(c)) + ": printable ASCII without \" or \\ only")
		}
	}
	return nil
}

// credentials returns the user and password of an Authorization value of
// the Basic scheme (RFC 7617 §2: base64 of user-id ":" password; the
// scheme's name ignores case), and whether it was one.
func credentials(v []byte) (user, password []byte, ok bool) {
	const scheme = "basic "
	if len(v) <= len(scheme) || !h1.EqualFold(v[:len(scheme)], scheme) {
		return nil, nil, false
	}
	enc := bytes.TrimLeft(v[len(scheme):], " ")
	if len(enc) > 4<<10 {
		return nil, nil, false
	}
	dec := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	n, err := base64.StdEncoding.Decode(dec, enc)
	if err != nil {
		return nil, nil, false
	}
	user, password, ok = bytes.Cut(dec[:n], []byte(":"))
	if !ok {
		return nil, nil, false
	}
	return user, password, true
}

// RequestFilter lets through a request with the credentials of a user,
// and answers any other 401.
func (b *Basic) RequestFilter(s *proxy.Session) *proxy.Response {
	v := s.Request.Header.Get("Authorization")
	if v == nil {
		s.Note("basic_auth", "missing")
		return b.challengeResponse("no credentials")
	}
	user, password, ok := credentials(v)
	if !ok || !b.users.Check(user, password) {
		s.Note("basic_auth", "denied")
		return b.challengeResponse("the credentials are not a user's")
	}
	s.Note("user", string(user))
	return nil
}

// challengeResponse is the 401 asking for credentials.
func (b *Basic) challengeResponse(why string) *proxy.Response {
	r := &proxy.Response{Status: 401, Body: []byte("401 Unauthorized\n")}
	r.Header.Add("Content-Type", "text/plain; charset=utf-8")
	r.Header.Add("Cache-Control", "no-store")
	r.Header.Add("WWW-Authenticate", b.challenge)
	r.Header.Add("Proxy-Status", `sluice; error=http_request_denied; details="basic authentication: `+why+`"`)
	return r
}

// UpstreamRequestFilter removes the Authorization field from the request
// sent upstream, unless the phase forwards it.
func (b *Basic) UpstreamRequestFilter(_ *proxy.Session, _ *proxy.Peer, req *h1.Request) {
	if !b.forward {
		req.Header.Del("Authorization")
	}
}
