package proxy

import (
	"strings"
	"testing"

	"github.com/sluice-proxy/sluice/h1"
)

// TestStripHopByHop checks what reaches the upstream of a request's
// fields: the hop-by-hop ones and those Connection names go, the rest stay
// in their order and case.
func TestStripHopByHop(t *testing.T) {
	tests := []struct {
		name        string
		fields      []string // "Name: value"
		keepUpgrade bool
		want        []string
	}{
		{"none", []string{"Host: a", "Accept: */*"}, false, []string{"Host: a", "Accept: */*"}},
		{"fixed set", []string{"Host: a", "connection: keep-alive", "Keep-Alive: timeout=5", "Proxy-Connection: x", "Upgrade: h2c", "X-A: 1"}, false,
			[]string{"Host: a", "X-A: 1"}},
		{"named by Connection", []string{"Connection: X-Secret, close", "X-Secret: 1", "x-secret: 2", "X-Other: 3"}, false,
			[]string{"X-Other: 3"}},
		{"Connection cannot remove Transfer-Encoding", []string{"Connection: Transfer-Encoding", "Transfer-Encoding: chunked"}, false,
			[]string{"Transfer-Encoding: chunked"}},
		{"upgrade kept", []string{"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Key: k"}, true,
			[]string{"Upgrade: websocket", "Sec-WebSocket-Key: k"}},
		{"TE trailers stays", []string{"TE:  trailers ", "Accept: a"}, false, []string{"TE:  trailers ", "Accept: a"}},
		{"TE other goes", []string{"TE: gzip", "te: trailers", "Accept: a"}, false, []string{"te: trailers", "Accept: a"}},
		{"same lengths, other names", []string{"Connectioz: 1", "Keep-Alivf: 2", "Upgradf: 3", "TF: 4", "Proxy-Connectiox: 5"}, false,
			[]string{"Connectioz: 1", "Keep-Alivf: 2", "Upgradf: 3", "TF: 4", "Proxy-Connectiox: 5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h h1.Header
			for _, f := range tt.fields {
				name, value, _ := strings.Cut(f, ": ")
				h.Add(name, value)
			}
			stripHopByHop(&h, tt.keepUpgrade)
			var got []string
			for i := 0; i < h.Len(); i++ {
				got = append(got, string(h.Name(i))+": "+string(h.Value(i)))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
