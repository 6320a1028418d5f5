// Package headers is a route phase that changes header fields: of the
// requests sent upstream, and of the responses that go to the client, from
// an upstream or from sluice itself (security headers on a 503, say).
package headers

import (
	"fmt"
	"strings"

	"github.com/sluice-proxy/sluice/h1"
	"github.com/sluice-proxy/sluice/proxy"
)

// Field is one header field to set or add.
type Field struct {
	Name, Value string
}

// Rules change the fields of one message, in this order: every field
// named in Remove is removed; each field of Set replaces every field of
// its name (keeping the place and spelling of the first, or added at the
// end); each field of Add is added at the end, beside any of its name.
// Names match ignoring case.
type Rules struct {
	Remove []string
	Set    []Field
	Add    []Field
}

// Empty reports whether r changes nothing.
func (r *Rules) Empty() bool { return len(r.Remove) == 0 && len(r.Set) == 0 && len(r.Add) == 0 }

// Apply changes h by the rules.
func (r *Rules) Apply(h *h1.Header) {
	for _, name := range r.Remove {
		h.Del(name)
	}
	for _, f := range r.Set {
		h.Set(f.Name, f.Value)
	}
	for _, f := range r.Add {
		h.Add(f.Name, f.Value)
	}
}

// Phase applies Request to the head of every try sent upstream (so a
// retry carries the same fields), and Response to every response the
// client gets for the route: an upstream's, and the answers sluice makes
// itself (an error's, a phase's, such as a 403 or a 413). It notes
// nothing in the access log: it acts on every request alike. Make one
// with New, which checks the rules.
type Phase struct {
	Request, Response Rules
}

// New returns a phase with the request and response rules, or an error
// naming the first field the rules may not touch or whose name or value
// is not valid (see Check).
func New(request, response Rules) (*Phase, error) {
	for _, c := range []struct {
		what  string
		rules *Rules
	}{{"request", &request}, {"response", &response}} {
		names := append([]string(nil), c.rules.Remove...)
		for _, f := range append(append([]Field(nil), c.rules.Set...), c.rules.Add...) {
			if msg := CheckValue(f.Value); msg != "" {
				return nil, fmt.Errorf("headers: %s field %s: %s", c.what, f.Name, msg)
			}
			names = append(names, f.Name)
		}
		for _, n := range names {
			if msg := CheckName(n, c.what == "request"); msg != "" {
				return nil, fmt.Errorf("headers: %s field %q: %s", c.what, n, msg)
			}
		}
	}
	return &Phase{Request: request, Response: response}, nil
}

// UpstreamRequestFilter applies the request rules to the head sent upstream.
func (p *Phase) UpstreamRequestFilter(_ *proxy.Session, _ *proxy.Peer, req *h1.Request) {
	p.Request.Apply(&req.Header)
}

// ResponseFilter applies the response rules to an upstream's response.
func (p *Phase) ResponseFilter(_ *proxy.Session, _ *proxy.Peer, resp *h1.Response) {
	p.Response.Apply(&resp.Header)
}

// AnswerFilter applies the response rules to an answer sluice makes itself.
func (p *Phase) AnswerFilter(_ *proxy.Session, resp *h1.Response) {
	p.Response.Apply(&resp.Header)
}

// reserved are the fields no rule may set, add or remove, and why: they
// frame the message or describe the connection (RFC 9110 §7.6.1, RFC
// 9112 §6), and sluice sets them itself; changing one would desynchronise
// the message from its body, or the hop from the next.
var reserved = map[string]string{
	"content-length":    "it frames the body, which sluice forwards as it is framed",
	"transfer-encoding": "it frames the body, which sluice forwards as it is framed",
	"connection":        "it is hop-by-hop, for sluice to set on each connection",
	"keep-alive":        "it is hop-by-hop, for sluice to set on each connection",
	"proxy-connection":  "it is hop-by-hop, for sluice to set on each connection",
	"upgrade":           "it is hop-by-hop; protocol upgrades are the client's to ask for",
	"te":                "it is hop-by-hop, for sluice to set on each connection",
	"trailer":           "it announces the trailer fields of the body, which sluice forwards as they come",
}

// CheckName returns why a rule may not name the field name ("" when it
// may): not a token (RFC 9110 §5.1), a field that frames the message or
// is hop-by-hop, or, for a request rule, Host, which the request was
// routed by (a library user sets another with proxy.PeerOptions.Host).
func CheckName(name string, request bool) string {
	if name == "" {
		return "a field name must not be empty"
	}
	if !h1.ValidName(name) {
		for i := 0; i < len(name); i++ {
			if !h1.ValidName(name[i : i+1]) {
				return fmt.Sprintf("not a valid field name: %q is not allowed in one (RFC 9110 §5.1: a token)", name[i])
			}
		}
	}
	if why, ok := reserved[strings.ToLower(name)]; ok {
		return "cannot be set or removed: " + why
	}
	if request && strings.EqualFold(name, "Host") {
		return "cannot be set or removed in requests: the request was routed by it, and it goes upstream as the client sent it"
	}
	return ""
}

// CheckValue returns why v may not be a field value ("" when it may): a
// CR, LF, NUL or other control character (RFC 9110 §5.5), or whitespace at
// either end, which a field value does not hold.
func CheckValue(v string) string {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\r' || c == '\n' || c == 0:
			return fmt.Sprintf("a field value must not hold %q (RFC 9110 §5.5)", c)
		case !h1.ValidValue(v[i : i+1]):
			return fmt.Sprintf("a field value must not hold the control character %q (RFC 9110 §5.5)", c)
		}
	}
	if strings.TrimSpace(v) != v {
		return "a field value must not begin or end with whitespace (RFC 9110 §5.5)"
	}
	return ""
}
