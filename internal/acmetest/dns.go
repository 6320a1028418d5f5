package acmetest

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// zone is what the DNS server holds: A 127.0.0.1 for every name and, when
// name is set, that zone's SOA and the TXT records updates added.
type zone struct {
	name string // fully qualified; "." when there is no zone
	key  string // the TSIG key name updates must be signed with

	cname  map[string]string // lower-case fully qualified names
	txtDir string            // Options.TXTDir

	mu               sync.Mutex
	txt              map[string][]string // by lower-case fully qualified name
	updates, refused int
}

// TXT returns the TXT records the DNS server holds for name.
func (ca *CA) TXT(name string) []string {
	z := ca.zone
	z.mu.Lock()
	defer z.mu.Unlock()
	return slices.Clone(z.txt[strings.ToLower(dns.Fqdn(name))])
}

// Updates returns the number of updates the DNS server applied, and of
// those it refused (unsigned, signed with another key or badly, or
// outside its zone).
func (ca *CA) Updates() (applied, refused int) {
	z := ca.zone
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.updates, z.refused
}

// startDNS serves z over TCP (pebble asks over TCP only) and UDP, on one
// port of 127.0.0.1, until the test ends, and returns its address.
// Updates are checked against the TSIG key z.key with secret.
func startDNS(t testing.TB, z *zone, secret string) string {
	t.Helper()
	var tsig map[string]string
	if z.key != "" {
		tsig = map[string]string{z.key: secret}
	}
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err != nil {
			ln.Close()
			if attempt == 5 {
				t.Fatalf("no port free for both TCP and UDP: %v", err)
			}
			continue
		}
		for _, srv := range []*dns.Server{
			{Listener: ln, Handler: z, TsigSecret: tsig},
			{PacketConn: pc, Handler: z, TsigSecret: tsig},
		} {
			// miekg/dns answers updates NOTIMP unless told to take them.
			srv.MsgAcceptFunc = func(dns.Header) dns.MsgAcceptAction { return dns.MsgAccept }
			started := make(chan struct{})
			srv.NotifyStartedFunc = func() { close(started) }
			go srv.ActivateAndServe()
			<-started
			t.Cleanup(func() { srv.Shutdown() })
		}
		return ln.Addr().String()
	}
}

func (z *zone) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	if r.Opcode == dns.OpcodeUpdate {
		m.Rcode = z.update(w, r)
		if t := r.IsTsig(); t != nil && w.TsigStatus() == nil {
			m.SetTsig(t.Hdr.Name, t.Algorithm, 300, int64(t.TimeSigned))
		}
		w.WriteMsg(m)
		return
	}
	z.mu.Lock()
	for _, q := range r.Question {
		name := strings.ToLower(q.Name)
		switch q.Qtype {
		case dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET},
				A:   net.IPv4(127, 0, 0, 1),
			})
		case dns.TypeSOA:
			if z.name != "." && name == z.name {
				m.Answer = append(m.Answer, z.soa())
			}
		case dns.TypeTXT:
			owner := q.Name
			if to, ok := z.cname[name]; ok {
				m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 1}, Target: to})
				owner, name = to, to
			}
			for _, v := range slices.Concat(z.txt[name], z.filed(name)) {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 1}, Txt: []string{v}})
			}
		}
	}
	z.mu.Unlock()
	w.WriteMsg(m)
}

// update applies an RFC 2136 update of TXT records and returns the rcode
// to answer it with.
func (z *zone) update(w dns.ResponseWriter, r *dns.Msg) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	t := r.IsTsig()
	switch {
	case z.key == "" || t == nil || t.Hdr.Name != z.key || w.TsigStatus() != nil:
		z.refused++
		return dns.RcodeRefused
	case len(r.Question) != 1 || strings.ToLower(r.Question[0].Name) != z.name:
		z.refused++
		return dns.RcodeNotAuth
	}
	for _, rr := range r.Ns {
		txt, ok := rr.(*dns.TXT)
		name := strings.ToLower(rr.Header().Name)
		if !ok || !dns.IsSubDomain(z.name, name) {
			z.refused++
			return dns.RcodeRefused
		}
		v := strings.Join(txt.Txt, "")
		switch rr.Header().Class {
		case dns.ClassINET: // add
			if !slices.Contains(z.txt[name], v) {
				z.txt[name] = append(z.txt[name], v)
			}
		case dns.ClassNONE: // delete this record
			z.txt[name] = slices.DeleteFunc(z.txt[name], func(s string) bool { return s == v })
			if len(z.txt[name]) == 0 {
				delete(z.txt, name)
			}
		}
	}
	z.updates++
	return dns.RcodeSuccess
}

// filed returns the TXT records of name, fully qualified, in z.txtDir.
func (z *zone) filed(name string) []string {
	if z.txtDir == "" || strings.ContainsAny(name, "/\\") {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(z.txtDir, strings.TrimSuffix(name, ".")))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

func (z *zone) soa() *dns.SOA {
	return &dns.SOA{
		Hdr: dns.RR_Header{Name: z.name, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
		Ns:  "ns." + z.name, Mbox: "hostmaster." + z.name, Serial: 1, Refresh: 60, Retry: 60, Expire: 600, Minttl: 1,
	}
}
