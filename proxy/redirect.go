package proxy

import (
	"bytes"
	"net"
	"strconv"

	"github.com/sluice-proxy/sluice/fault"
)

// RedirectHTTPS is a Handler that answers every request with 308
// Permanent Redirect to the same host, path and query over https, for a
// plain listener in front of a TLS one (ListenerOptions.Handler). A 308
// keeps the method and body (RFC 9110 §15.4.9): a POST stays a POST.
//
// The host is the request's Host without its port (its target's
// authority, for an absolute-form target), or, without one (an HTTP/1.0
// client), the address the client connected to. Port is the HTTPS port
// the redirect names; 0 and 443 name none. The connection stays open when
// the request had no body, as after any answer.
type RedirectHTTPS struct {
	Port int
}

// UpstreamPeer implements Handler. It is never asked: RequestFilter answers
// every request.
func (rd *RedirectHTTPS) UpstreamPeer(*Session) (*Peer, error) {
	return nil, &fault.Error{Kind: fault.NoUpstream, Source: fault.Internally, Context: "a redirect to https has no upstream"}
}

// RequestFilter implements RequestFilter: the 308.
func (rd *RedirectHTTPS) RequestFilter(s *Session) *Response {
	host := hostOnly(s.Request.Header.Get("Host"))
	if host == "" {
		host = localHost(s.c.raw.LocalAddr())
	}
	loc := "https://" + host
	if rd.Port != 0 && rd.Port != 443 {
		loc += ":" + strconv.Itoa(rd.Port)
	}
	if t := s.Request.Target(); len(t) > 0 && t[0] == '/' {
		loc += string(t)
	} else {
		loc += "/" // OPTIONS *
	}
	r := Text(308, "308 Permanent Redirect: "+loc+"\n")
	r.Header.Add("Location", loc)
	return r
}

// hostOnly returns the host of a Host value (validated by h1: a reg-name
// or an IP literal, with an optional port) without the port.
func hostOnly(v []byte) string {
	if len(v) > 0 && v[0] == '[' {
		if end := bytes.IndexByte(v, ']'); end > 0 {
			return string(v[:end+1])
		}
		return ""
	}
	if i := bytes.LastIndexByte(v, ':'); i >= 0 {
		v = v[:i]
	}
	return string(v)
}

// localHost names the address a client connected to, for a URL.
func localHost(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return "localhost"
	}
	ip := ta.AddrPort().Addr().Unmap().WithZone("")
	if ip.Is6() {
		return "[" + ip.String() + "]"
	}
	return ip.String()
}
