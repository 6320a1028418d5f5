package balance

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/sluice-proxy/sluice/h1"
)

// mapKeys returns the server each of n keys hashes to when the ring holds
// ring and the candidates are cands.
func mapKeys(ring, cands []*Server, n int) []*Server {
	var h Hash
	h.SetServers(ring)
	c := candidates(cands, time.Time{})
	out := make([]*Server, n)
	var req Request
	for i := range n {
		req.HashKey = fmt.Appendf(req.HashKey[:0], "user-%d", i)
		out[i] = h.Pick(c, req)
	}
	return out
}

func moved(a, b []*Server) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func TestConsistentHashingMovesFewKeys(t *testing.T) {
	const keys = 10000
	for _, n := range []int{3, 5, 8} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ws := make([]int, n)
			for i := range ws {
				ws[i] = 1
			}
			all := servers(ws...)
			before := mapKeys(all, all, keys)

			// Remove each server in turn: only its keys move, and they are
			// at most 1.3/n of all.
			for r := range all {
				rest := append(append([]*Server(nil), all[:r]...), all[r+1:]...)
				after := mapKeys(rest, rest, keys)
				m := moved(before, after)
				if limit := 1.3 / float64(n) * keys; float64(m) > limit {
					t.Errorf("removing %s moved %d keys, want <= %.0f", all[r], m, limit)
				}
				for i := range before {
					if before[i] != all[r] && after[i] != before[i] {
						t.Fatalf("key %d moved from %s, which stayed", i, before[i])
					}
				}
				// Adding it back to the n-1 others moves at most 1.3/n
				// and restores the original mapping.
				back := mapKeys(all, all, keys)
				if m := moved(after, back); float64(m) > 1.3/float64(n)*keys {
					t.Errorf("adding %s back moved %d keys, want <= %.0f", all[r], m, 1.3/float64(n)*keys)
				}
				if m := moved(before, back); m != 0 {
					t.Errorf("adding %s back left %d keys elsewhere", all[r], m)
				}
			}
		})
	}
}

func TestHashExclusionWalksTheRing(t *testing.T) {
	const keys = 2000
	all := servers(1, 1, 1, 1, 1)
	// Excluding a server as a candidate (it failed this request, or is down)
	// must send its keys where removing it from the ring would: the next
	// distinct server along the ring, the same every time.
	for x := range all {
		var cands []*Server
		for i, s := range all {
			if i != x {
				cands = append(cands, s)
			}
		}
		got := mapKeys(all, cands, keys)
		want := mapKeys(cands, cands, keys)
		if m := moved(got, want); m != 0 {
			t.Errorf("excluding %s: %d keys differ from removing it", all[x], m)
		}
	}
}

func TestHashThroughGroupSkipsTriedServer(t *testing.T) {
	g := NewGroup("u", servers(1, 1, 1, 1), new(Hash), testOptions(newClock()))
	key := []byte("session-42")
	first, _ := g.Pick(Request{HashKey: key})
	g.Report(first, Result{Failure: ConnectFailure})
	for range 20 {
		s, _ := g.Pick(Request{HashKey: key})
		if s != first {
			t.Fatalf("same key went to %s, then %s", first, s)
		}
		g.Report(s, Result{Status: 200})
	}
	retry, _ := g.Pick(Request{HashKey: key, Tries: tried{first.Addr: failed}})
	if retry == first {
		t.Fatalf("retry went back to the failed %s", first)
	}
	g.Report(retry, Result{Status: 200})
	for range 20 {
		s, _ := g.Pick(Request{HashKey: key, Tries: tried{first.Addr: failed}})
		if s != retry {
			t.Fatalf("retries of one key went to %s and %s", retry, s)
		}
		g.Report(s, Result{Status: 200})
	}
}

func TestParseHashKey(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		want string
	}{
		{"client_ip", true, "client_ip"},
		{"uri", true, "uri"},
		{"header:X-User", true, "header:X-User"},
		{"cookie:sid", true, "cookie:sid"},
		{"", false, ""},
		{"header:", false, ""},
		{"header:bad name", false, ""},
		{"cookie", false, ""},
		{"query:x", false, ""},
		{"Client_IP", false, ""},
	}
	for _, tt := range tests {
		k, err := ParseHashKey(tt.in)
		if (err == nil) != tt.ok || k.String() != tt.want {
			t.Errorf("ParseHashKey(%q) = %q, %v", tt.in, k, err)
		}
	}
}

func TestHashKeyAppend(t *testing.T) {
	raw := "GET /cart?id=7 HTTP/1.1\r\nHost: shop\r\nX-User: alice\r\nCookie: theme=dark; sid=abc123\r\nCookie: other=1\r\n\r\n"
	var req h1.Request
	if err := h1.ParseRequest(&req, []byte(raw), 100); err != nil {
		t.Fatal(err)
	}
	client := netip.MustParseAddr("::ffff:192.0.2.7")
	tests := []struct {
		key  string
		want string
	}{
		{"client_ip", "192.0.2.7"},
		{"uri", "/cart?id=7"},
		{"header:x-user", "alice"},
		{"header:X-Missing", ""},
		{"cookie:sid", "abc123"},
		{"cookie:theme", "dark"},
		{"cookie:other", "1"},
		{"cookie:SID", ""}, // cookie names are case-sensitive
		{"cookie:none", ""},
	}
	buf := make([]byte, 0, 64)
	for _, tt := range tests {
		k, err := ParseHashKey(tt.key)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(k.Append(buf[:0], client, &req)); got != tt.want {
			t.Errorf("%s: key %q, want %q", tt.key, got, tt.want)
		}
	}
	if got := (HashKey{}).Append(nil, client, &req); len(got) != 0 {
		t.Errorf("zero HashKey appended %q", got)
	}
	k, _ := ParseHashKey("cookie:sid")
	if n := testing.AllocsPerRun(100, func() { buf = k.Append(buf[:0], client, &req) }); n != 0 {
		t.Errorf("Append allocates %v times", n)
	}
}
