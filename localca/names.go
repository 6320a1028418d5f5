package localca

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// CheckName checks a name an Authority may issue for and returns it
// normalized: a DNS name of letters, digits and hyphens (lower case,
// without a trailing dot; a single label such as localhost or myapp
// too), a pattern of one ("*.app.test": any name with one or more labels
// in front of app.test, not app.test itself, as a route's host matches),
// or an IP address (IPv4 written as such; without a zone).
func CheckName(name string) (string, error) {
	if a, err := netip.ParseAddr(name); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("%s: an address with a zone; name the address alone", name)
		}
		return a.Unmap().String(), nil
	}
	n := strings.ToLower(strings.TrimSuffix(name, "."))
	if rest, ok := strings.CutPrefix(n, "*."); ok {
		if _, err := checkDNSName(rest); err != nil {
			return "", fmt.Errorf("%s is not a pattern of a domain name (%v)", name, err)
		}
		return n, nil
	}
	if _, err := checkDNSName(n); err != nil {
		return "", fmt.Errorf("%s is not a domain name or an IP address: %v", name, err)
	}
	return n, nil
}

// checkDNSName checks n, lower case without a trailing dot: one or more
// labels of 1 to 63 letters, digits and hyphens, neither starting nor
// ending with one; 253 bytes at most.
func checkDNSName(n string) (string, error) {
	switch {
	case n == "":
		return "", errors.New("empty")
	case len(n) > 253:
		return "", errors.New("longer than a domain name can be (253)")
	}
	for l := range strings.SplitSeq(n, ".") {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", errors.New("each label is 1 to 63 letters, digits or hyphens, not starting or ending with one")
		}
		for _, c := range []byte(l) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return "", fmt.Errorf("%q is not allowed in one (write an IDN in its xn-- form)", c)
			}
		}
	}
	return n, nil
}

// clientName is the name a certificate is issued for from what a client
// asked for in SNI: a DNS name normalized, or an IP address (clients
// should not send one, some do); "" for anything else.
func clientName(sni string) string {
	if a, err := netip.ParseAddr(sni); err == nil {
		if a.Zone() != "" {
			return ""
		}
		return a.Unmap().String()
	}
	n, err := checkDNSName(strings.ToLower(strings.TrimSuffix(sni, ".")))
	if err != nil {
		return ""
	}
	return n
}

// policy says which names an Authority issues for.
type policy struct {
	any      bool
	exact    map[string]bool // DNS names and IP addresses, normalized
	suffixes []string        // ".app.test" for the pattern *.app.test
}

// newPolicy makes the policy of names (each checked by CheckName), and
// of any name when any is set.
func newPolicy(names []string, any bool) (policy, error) {
	p := policy{any: any, exact: map[string]bool{}}
	for _, s := range names {
		n, err := CheckName(s)
		if err != nil {
			return policy{}, fmt.Errorf("localca: %w", err)
		}
		if rest, ok := strings.CutPrefix(n, "*"); ok {
			p.suffixes = append(p.suffixes, rest)
		} else {
			p.exact[n] = true
		}
	}
	return p, nil
}

// allows reports whether name (as clientName returns it) may have a
// certificate.
func (p policy) allows(name string) bool {
	if name == "" {
		return false
	}
	if p.any || p.exact[name] {
		return true
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return false // a pattern covers DNS names only
	}
	for _, s := range p.suffixes {
		if len(name) > len(s) && strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}
