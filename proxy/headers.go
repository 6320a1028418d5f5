package proxy

import (
	"bytes"
	"net/netip"

	"github.com/sluice-proxy/sluice/h1"
)

// isHopByHop reports whether the field name: value describes one
// connection and never passes a proxy (RFC 9110 §7.6.1), besides those the
// Connection field names: Connection, Keep-Alive, Proxy-Connection and
// Upgrade (unless keepUpgrade), and TE unless it only asks for trailers,
// which sluice passes through. Transfer-Encoding is hop-by-hop too, but
// bodies pass through with their framing intact, so it stays with them.
func isHopByHop(name, value []byte, keepUpgrade bool) bool {
	switch len(name) { // most names are passed over by their length alone
	case 2:
		return h1.EqualFold(name, "TE") && !h1.EqualFold(bytes.TrimSpace(value), "trailers")
	case 7:
		return !keepUpgrade && h1.EqualFold(name, "Upgrade")
	case 10:
		return h1.EqualFold(name, "Connection") || h1.EqualFold(name, "Keep-Alive")
	case 16:
		return h1.EqualFold(name, "Proxy-Connection")
	}
	return false
}

// stripHopByHop removes the hop-by-hop fields from h. With keepUpgrade, the
// Upgrade field stays (a protocol switch being relayed).
func stripHopByHop(h *h1.Header, keepUpgrade bool) {
	// Fields named in Connection go first, while Connection is still there.
	for i := h.Index("Connection"); i >= 0 && i < h.Len(); i++ {
		if !h1.EqualFold(h.Name(i), "Connection") {
			continue
		}
		v := h.Value(i)
		for len(v) > 0 {
			var tok []byte
			tok, v = h1.CutList(v)
			if len(tok) == 0 || h1.EqualFold(tok, "Transfer-Encoding") ||
				(keepUpgrade && h1.EqualFold(tok, "Upgrade")) || h1.EqualFold(tok, "Connection") ||
				h1.EqualFold(tok, "keep-alive") { // a hop-by-hop field, removed below
				continue
			}
			delNamed(h, tok, i)
		}
	}
	for i := h.Len() - 1; i >= 0; i-- {
		if isHopByHop(h.Name(i), h.Value(i), keepUpgrade) {
			h.DelAt(i)
		}
	}
}

// delNamed removes the fields called name except the one at keep (the
// Connection field being read).
func delNamed(h *h1.Header, name []byte, keep int) {
	if !h.Has(string(name)) { // most often "close", which names no field
		return
	}
	for j := h.Len() - 1; j >= 0; j-- {
		if j != keep && bytes.EqualFold(h.Name(j), name) {
			h.DelAt(j)
		}
	}
}

var xForwardedHost = []byte("X-Forwarded-Host")

// buildUpstreamRequest makes s.upReq, the head sent to peer: the client's
// request with hop-by-hop fields removed, forwarding fields added, an
// upgrade kept when one was asked for, then the UpstreamRequestFilter hook.
func (s *Session) buildUpstreamRequest(peer *Peer) {
	r := &s.upReq
	r.CopyFrom(&s.Request)
	stripHopByHop(&r.Header, s.upgrade)
	if s.upgrade {
		r.Header.Add("Connection", "Upgrade")
	}
	switch {
	case peer.Options != nil && peer.Options.Host != "":
		r.Header.Set("Host", peer.Options.Host)
	case !r.Header.Has("Host"):
		// An HTTP/1.0 client may send none, but the request goes upstream
		// as HTTP/1.1, which requires one (RFC 9112 §3.2). A Unix socket
		// has no host: "localhost", as nginx sends.
		r.Header.Add("Host", peer.host())
	}
	fw := &s.srv.Forwarding
	trusted := s.c.trusted
	if !fw.NoXForwardedFor {
		if i := r.Header.Index("X-Forwarded-For"); i >= 0 && trusted {
			// Extend the list the trusted peer sent (its fields joined,
			// RFC 9110 §5.3), as nginx's $proxy_add_x_forwarded_for
			// does.
			v := append([]byte(nil), r.Header.Value(i)...)
			for j := i + 1; j < r.Header.Len(); j++ {
				if h1.EqualFold(r.Header.Name(j), "X-Forwarded-For") {
					v = append(append(v, ", "...), r.Header.Value(j)...)
				}
			}
			v = append(append(v, ", "...), s.Peer...)
			r.Header.Set("X-Forwarded-For", string(v))
		} else if i >= 0 {
			r.Header.Set("X-Forwarded-For", s.Peer)
		} else {
			r.Header.Add("X-Forwarded-For", s.Peer)
		}
	}
	if !fw.NoXForwardedProto && !(trusted && r.Header.Has("X-Forwarded-Proto")) {
		if s.TLS != nil {
			r.Header.Set("X-Forwarded-Proto", "https")
		} else {
			r.Header.Set("X-Forwarded-Proto", "http")
		}
	}
	if !fw.NoXForwardedHost && !(trusted && r.Header.Has("X-Forwarded-Host")) {
		if host := s.Request.Header.Get("Host"); host != nil {
			if r.Header.Has("X-Forwarded-Host") {
				r.Header.Set("X-Forwarded-Host", string(host))
			} else {
				r.Header.AddBytes(xForwardedHost, host)
			}
		} else {
			r.Header.Del("X-Forwarded-Host") // the client's, untrusted
		}
	}
	if !fw.NoVia {
		r.Header.Add("Via", "1.1 sluice")
	}
	if s.Early && !r.Header.Has("Early-Data") {
		// RFC 8470 §5.1: the origin may answer 425 itself.
		r.Header.Add("Early-Data", "1")
	}
	if s.idOwn {
		// Not the trusted peer's: any the client sent is replaced.
		if r.Header.Has(RequestIDHeader) {
			r.Header.Del(RequestIDHeader)
		}
		r.Header.AddBytes(requestIDName, s.reqID)
	}
	if f := s.hooks.upstreamRequestFilter; f != nil {
		f.UpstreamRequestFilter(s, peer, r)
	}
}

// clientFromXFF makes the client the one a trusted peer's X-Forwarded-For
// names (Forwarding.ClientFromXFF): walking its entries from the right,
// the first address that is not itself trusted; the leftmost when all
// are. An entry that is not an address (or an address and port) ends the
// walk with what was found so far, as nginx's real_ip module does.
func (s *Session) clientFromXFF() {
	h := &s.Request.Header
	fw := &s.srv.Forwarding
	var found netip.Addr
	// Fields from last to first, each list from its end: the rightmost
	// entry was added by the nearest proxy.
	for i := h.Len() - 1; i >= 0; i-- {
		if !h1.EqualFold(h.Name(i), "X-Forwarded-For") {
			continue
		}
		v := h.Value(i)
		for len(v) > 0 {
			entry := v
			if j := bytes.LastIndexByte(v, ','); j >= 0 {
				entry, v = v[j+1:], v[:j]
			} else {
				v = nil
			}
			addr, ok := parseForwardedAddr(bytes.TrimSpace(entry))
			if !ok {
				goto done
			}
			found = addr
			if !fw.trusts(addr) {
				goto done
			}
		}
	}
done:
	if found.IsValid() {
		s.ClientIP = found
		s.Client = found.String()
	}
}

// parseForwardedAddr parses an X-Forwarded-For entry: an address, or an
// address and port ("192.0.2.1:1234", "[2001:db8::1]:443").
func parseForwardedAddr(b []byte) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(string(b)); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(string(b)); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}
