package static

import "github.com/sluice-proxy/sluice/h1"

// codings are the precompressed siblings looked for, in the order they
// are preferred when a client accepts both equally: name.br, then
// name.gz.
var codings = [...]struct{ name, suffix string }{{"br", ".br"}, {"gzip", ".gz"}}

// accepted returns the weights (q-values, in thousandths) the request's
// Accept-Encoding fields give each of codings (RFC 9110 §12.5.3): its own
// entry's, else "*"'s, else 0. "x-gzip" counts as gzip. No field at all
// accepts no coding.
func accepted(h *h1.Header) (q [len(codings)]int) {
	var named [len(codings)]bool
	star := 0
	for i := 0; i < h.Len(); i++ {
		if !h1.EqualFold(h.Name(i), "Accept-Encoding") {
			continue
		}
		v := h.Value(i)
		for len(v) > 0 {
			var item []byte
			item, v = cut(v, ',')
			token, params := cut(item, ';')
			token = trimOWS(token)
			w := 1000
			for len(params) > 0 {
				var p []byte
				p, params = cut(params, ';')
				p = trimOWS(p)
				if len(p) > 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=' {
					w = qvalue(p[2:])
				}
			}
			switch {
			case len(token) == 1 && token[0] == '*':
				star = w
			case h1.EqualFold(token, "x-gzip"):
				token = []byte("gzip")
				fallthrough
			default:
				for j, c := range codings {
					if h1.EqualFold(token, c.name) {
						q[j], named[j] = w, true
					}
				}
			}
		}
	}
	for j := range q {
		if !named[j] {
			q[j] = star
		}
	}
	return q
}

// qvalue parses a weight, "0" to "1" with up to three decimals, into
// thousandths; one that does not parse counts as 0, refusing the coding.
func qvalue(v []byte) int {
	v = trimOWS(v)
	if len(v) == 0 || len(v) > 5 || (v[0] != '0' && v[0] != '1') {
		return 0
	}
	w := int(v[0]-'0') * 1000
	if len(v) == 1 {
		return w
	}
	if v[1] != '.' {
		return 0
	}
	scale := 100
	for _, c := range v[2:] {
		if c < '0' || c > '9' {
			return 0
		}
		w += int(c-'0') * scale
		scale /= 10
	}
	return min(w, 1000)
}

func cut(v []byte, sep byte) (before, after []byte) {
	for i, c := range v {
		if c == sep {
			return v[:i], v[i+1:]
		}
	}
	return v, nil
}
