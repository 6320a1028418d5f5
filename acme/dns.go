package acme

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/libdns/libdns"
	"github.com/miekg/dns"
	"go.uber.org/zap"
)

// DNS says how a Manager answers the CA's DNS-01 challenge, the one that
// validates wildcard names (*.example.com) and names whose servers the CA
// cannot reach: it puts a TXT record at _acme-challenge.NAME by an RFC
// 2136 dynamic update, signed with a TSIG key (RFC 8945), to the zone's
// primary DNS server (BIND, Knot, PowerDNS and most others take them), waits
// until the zone's servers answer it, and removes it once the CA has looked.
// Instead of updates, a hook program of the operator's may write and
// remove the records (Exec), through any DNS provider's API or tool.
// A Manager with DNS answers DNS-01 alone: its listeners answer no
// challenge.
type DNS struct {
	// Server is the host:port of the DNS server that takes the zone's
	// updates; a port of 53 when none is given. Server or Exec, not both.
	Server string
	// Exec is a hook program and its first arguments, run as
	// Exec... present FQDN VALUE to add the TXT record FQDN (with its
	// final dot) holding VALUE, and Exec... cleanup FQDN VALUE to remove
	// it, as lego's exec provider does; it exits 0 once done. Its
	// output is logged when it fails. Each run gets HookTimeout. Runs
	// may overlap, for one FQDN too (a domain and its wildcard), each
	// with its own value.
	Exec []string
	// KeyName is the TSIG key's name, as the server knows it; "" sends
	// the updates unsigned (a server that accepts them by address).
	KeyName string
	// KeyAlgorithm is the TSIG key's HMAC, one of KeyAlgorithms;
	// "hmac-sha256" when "".
	KeyAlgorithm string
	// Secret is the key's secret, base64, as tsig-keygen prints it.
	Secret string
	// Resolvers (host:port) find the zone of a name (its SOA) and watch
	// the record appear; nil means the system's resolvers, and then the
	// zone's own authoritative servers are watched.
	Resolvers []string
	// PropagationTimeout is how long to wait for the record to be
	// answered before the CA is asked to look (a CA that looks too early
	// fails the order); 0 means DefaultPropagationTimeout, a negative one
	// does not wait.
	PropagationTimeout time.Duration
	// OverrideDomain, when set, is where the TXT records are written
	// instead of _acme-challenge.NAME, which is a CNAME to it: a zone that
	// takes updates validates names whose own DNS does not (a hosted
	// one). Every domain's record goes there.
	OverrideDomain string
}

// DefaultPropagationTimeout is how long a DNS waits for its record to be
// answered unless told otherwise.
const DefaultPropagationTimeout = 2 * time.Minute

// KeyAlgorithms are the TSIG algorithms a DNS's KeyAlgorithm may name,
// the default first.
var KeyAlgorithms = []string{"hmac-sha256", "hmac-sha224", "hmac-sha384", "hmac-sha512", "hmac-sha1"}

// dnsAlgorithms are KeyAlgorithms as miekg/dns names them.
var dnsAlgorithms = map[string]string{
	"hmac-sha1":   dns.HmacSHA1,
	"hmac-sha224": dns.HmacSHA224,
	"hmac-sha256": dns.HmacSHA256,
	"hmac-sha384": dns.HmacSHA384,
	"hmac-sha512": dns.HmacSHA512,
}

// Check checks d and returns it with its defaults filled in: the server's
// port, the key's algorithm.
func (d DNS) Check() (DNS, error) {
	switch {
	case d.Server == "" && len(d.Exec) == 0:
		return d, errors.New("acme: dns: no server, and no exec hook")
	case d.Server != "" && len(d.Exec) > 0:
		return d, errors.New("acme: dns: a server and an exec hook: give one")
	case len(d.Exec) > 0:
		if d.Exec[0] == "" {
			return d, errors.New("acme: dns: exec: no program")
		}
		if d.KeyName != "" || d.Secret != "" {
			return d, errors.New("acme: dns: a TSIG key with an exec hook, which sends no updates")
		}
		return d.checkRest()
	}
	if _, _, err := net.SplitHostPort(d.Server); err != nil {
		d.Server = net.JoinHostPort(strings.Trim(d.Server, "[]"), "53")
	}
	if host, port, _ := net.SplitHostPort(d.Server); host == "" || port == "" {
		return d, fmt.Errorf("acme: dns: server %q is not host:port", d.Server)
	}
	if d.KeyAlgorithm == "" {
		d.KeyAlgorithm = KeyAlgorithms[0]
	}
	if _, ok := dnsAlgorithms[d.KeyAlgorithm]; !ok {
		return d, fmt.Errorf("acme: dns: key algorithm %q, want one of %s", d.KeyAlgorithm, strings.Join(KeyAlgorithms, ", "))
	}
	switch {
	case d.KeyName == "" && d.Secret != "":
		return d, errors.New("acme: dns: a key secret without a key name")
	case d.KeyName != "" && d.Secret == "":
		return d, fmt.Errorf("acme: dns: key %s has no secret", d.KeyName)
	case d.Secret != "":
		if _, err := base64.StdEncoding.DecodeString(d.Secret); err != nil {
			return d, fmt.Errorf("acme: dns: key %s: the secret is not base64: %v", d.KeyName, err)
		}
	}
	return d.checkRest()
}

// checkRest is Check's part for both ways of writing records.
func (d DNS) checkRest() (DNS, error) {
	if d.OverrideDomain != "" {
		if labels, ok := dns.IsDomainName(d.OverrideDomain); !ok || labels < 2 || strings.ContainsAny(d.OverrideDomain, "* ") {
			return d, fmt.Errorf("acme: dns: override domain %q is not a domain name", d.OverrideDomain)
		}
	}
	for _, r := range d.Resolvers {
		if _, _, err := net.SplitHostPort(r); err != nil {
			return d, fmt.Errorf("acme: dns: resolver %q is not host:port", r)
		}
	}
	return d, nil
}

// solver is certmagic's DNS-01 solver for d, with the records written by
// rfc2136 updates or the hook.
func (d DNS) solver(log *zap.Logger) *certmagic.DNS01Solver {
	timeout := d.PropagationTimeout
	switch {
	case timeout < 0:
		timeout = -1 // certmagic's "do not check"
	case timeout == 0:
		timeout = DefaultPropagationTimeout
	}
	var provider certmagic.DNSProvider = &rfc2136{d: d}
	if len(d.Exec) > 0 {
		provider = &hook{argv: d.Exec}
	}
	return &certmagic.DNS01Solver{DNSManager: certmagic.DNSManager{
		DNSProvider:        provider,
		TTL:                time.Minute,
		PropagationTimeout: timeout,
		Resolvers:          d.Resolvers,
		OverrideDomain:     strings.TrimSuffix(d.OverrideDomain, "."),
		Logger:             log,
	}}
}

// rfc2136 adds and removes TXT records by RFC 2136 dynamic updates: the
// libdns provider certmagic's DNS-01 solver calls.
type rfc2136 struct{ d DNS }

// updateTimeout bounds one update exchange with the server.
const updateTimeout = 10 * time.Second

func (p *rfc2136) AppendRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	return recs, p.update(ctx, zone, recs, (*dns.Msg).Insert)
}

func (p *rfc2136) DeleteRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	return recs, p.update(ctx, zone, recs, (*dns.Msg).Remove)
}

// update sends the server one update of zone that adds or removes (op)
// recs, TXT records, and checks that the server applied it.
func (p *rfc2136) update(ctx context.Context, zone string, recs []libdns.Record, op func(*dns.Msg, []dns.RR)) error {
	zone = dns.Fqdn(zone)
	var rrs []dns.RR
	for _, rec := range recs {
		rr := rec.RR()
		if rr.Type != "TXT" {
			return fmt.Errorf("dns update: a %s record; only TXT records are written", rr.Type)
		}
		rrs = append(rrs, &dns.TXT{
			Hdr: dns.RR_Header{Name: dns.Fqdn(libdns.AbsoluteName(rr.Name, zone)), Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: uint32(rr.TTL / time.Second)},
			Txt: txtStrings(rr.Data),
		})
	}
	m := new(dns.Msg)
	m.SetUpdate(zone)
	op(m, rrs)
	c := &dns.Client{Net: "tcp", Timeout: updateTimeout}
	if p.d.KeyName != "" {
		name := dns.Fqdn(p.d.KeyName)
		m.SetTsig(name, dnsAlgorithms[p.d.KeyAlgorithm], 300, time.Now().Unix())
		c.TsigSecret = map[string]string{name: p.d.Secret}
	}
	ctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	in, _, err := c.ExchangeContext(ctx, m, p.d.Server)
	if err != nil {
		return fmt.Errorf("dns update of %s at %s: %w", zone, p.d.Server, err)
	}
	if in.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("dns update of %s at %s: the server answered %s", zone, p.d.Server, dns.RcodeToString[in.Rcode])
	}
	return nil
}

// txtStrings cuts a TXT record's text into the strings of at most 255
// bytes a record is made of.
func txtStrings(s string) []string {
	var out []string
	for len(s) > 255 {
		out, s = append(out, s[:255]), s[255:]
	}
	return append(out, s)
}
