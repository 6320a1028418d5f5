package compress

import (
	"bytes"

	"github.com/sluice-proxy/sluice/h1"
)

// Algorithm is a content coding sluice compresses with.
type Algorithm uint8

// The algorithms, by their content-coding names (RFC 9110 §8.4.1; zstd is
// RFC 8878's, br RFC 7932's).
const (
	None   Algorithm = iota // no compression
	Gzip                    // "gzip"
	Brotli                  // "br"
	Zstd                    // "zstd"
	numAlgorithms
)

// String returns the algorithm's content-coding name.
func (a Algorithm) String() string {
	switch a {
	case Gzip:
		return "gzip"
	case Brotli:
		return "br"
	case Zstd:
		return "zstd"
	}
	return "identity"
}

// ParseAlgorithm returns the algorithm a content-coding name (as config
// spells it: gzip, br, zstd) stands for.
func ParseAlgorithm(name string) (Algorithm, bool) {
	switch name {
	case "gzip":
		return Gzip, true
	case "br":
		return Brotli, true
	case "zstd":
		return Zstd, true
	}
	return None, false
}

// maxQ is the q-value 1, in thousandths.
const maxQ = 1000

// acceptance holds what Accept-Encoding says of each coding: its q-value
// in thousandths, -1 where it is not named.
type acceptance struct {
	q        [numAlgorithms]int
	star     int // "*": any coding not named
	identity int
}

func newAcceptance() acceptance {
	a := acceptance{star: -1, identity: -1}
	for i := range a.q {
		a.q[i] = -1
	}
	return a
}

// parse reads one Accept-Encoding field value (RFC 9110 §12.5.3):
//
//	Accept-Encoding  = #( codings [ weight ] )
//	codings          = content-coding / "identity" / "*"
//	weight           = OWS ";" OWS "q=" qvalue
//
// Names are case-insensitive; "x-gzip" is gzip (§8.4.1.3). An element that
// does not parse (a bad q-value, a parameter other than q) is ignored, and
// a coding named twice gets the lower of its q-values.
func (a *acceptance) parse(v []byte) {
	for len(v) > 0 {
		var item []byte
		item, v = h1.CutList(v)
		name, params, _ := bytes.Cut(item, []byte{';'})
		name = bytes.TrimSpace(name)
		if len(name) == 0 {
			continue
		}
		q := maxQ
		if len(bytes.TrimSpace(params)) > 0 {
			var ok bool
			if q, ok = parseWeight(params); !ok {
				continue
			}
		}
		var slot *int
		switch {
		case h1.EqualFold(name, "gzip"), h1.EqualFold(name, "x-gzip"):
			slot = &a.q[Gzip]
		case h1.EqualFold(name, "br"):
			slot = &a.q[Brotli]
		case h1.EqualFold(name, "zstd"):
			slot = &a.q[Zstd]
		case h1.EqualFold(name, "identity"):
			slot = &a.identity
		case len(name) == 1 && name[0] == '*':
			slot = &a.star
		default:
			continue
		}
		if *slot < 0 || q < *slot {
			*slot = q
		}
	}
}

// parseWeight parses `OWS "q=" qvalue` after the ';' (RFC 9110 §12.4.2):
// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ), in
// thousandths.
func parseWeight(p []byte) (int, bool) {
	p = bytes.TrimSpace(p)
	if len(p) < 3 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
		return 0, false
	}
	p = p[2:]
	if p[0] != '0' && p[0] != '1' {
		return 0, false
	}
	q := int(p[0]-'0') * maxQ
	p = p[1:]
	if len(p) == 0 {
		return q, true
	}
	if p[0] != '.' || len(p) > 4 {
		return 0, false
	}
	scale := 100
	for _, c := range p[1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		q += int(c-'0') * scale
		scale /= 10
	}
	if q > maxQ {
		return 0, false // "1.5"
	}
	return q, true
}

// of returns the q-value the client gives alg.
func (a *acceptance) of(alg Algorithm) int {
	if q := a.q[alg]; q >= 0 {
		return q
	}
	return max(a.star, 0)
}

// choose returns, of offered (in the server's order of preference), the
// algorithm with the highest q-value above 0, the first of equals; None
// when none is acceptable, or when the client names identity with a
// higher q-value than that.
func (a *acceptance) choose(offered []Algorithm) Algorithm {
	best, bestQ := None, 0
	for _, alg := range offered {
		if q := a.of(alg); q > bestQ {
			best, bestQ = alg, q
		}
	}
	if a.identity > bestQ {
		return None
	}
	return best
}

// Negotiate returns the algorithm of offered to compress a response to a
// request with header h with: the one its Accept-Encoding fields (all of
// them) give the highest q-value, the first in offered of those with the
// same; None when there is no Accept-Encoding, or it accepts none of
// offered, or it prefers identity.
func Negotiate(h *h1.Header, offered []Algorithm) Algorithm {
	a := newAcceptance()
	seen := false
	for i := 0; i < h.Len(); i++ {
		if h1.EqualFold(h.Name(i), "Accept-Encoding") {
			seen = true
			a.parse(h.Value(i))
		}
	}
	if !seen {
		return None
	}
	return a.choose(offered)
}

// NegotiateValue is Negotiate for one Accept-Encoding field value.
func NegotiateValue(v []byte, offered []Algorithm) Algorithm {
	a := newAcceptance()
	a.parse(v)
	return a.choose(offered)
}
