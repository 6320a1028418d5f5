package proxytest

import (
	"bytes"
	"sync"

	"github.com/sluice-proxy/sluice/proxy"
)

// Buffer is a bytes.Buffer that a server writes its logs to while the test
// reads them: its methods may be called from any goroutine.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Peer is a route.Picker that gives every try to one peer.
type Peer struct{ P *proxy.Peer }

// Pick returns the peer.
func (p Peer) Pick(*proxy.Session) (*proxy.Peer, error) { return p.P, nil }

// Untried is a route.Picker that gives each try the first of its peers
// the request has not tried yet (the first again once all were): a retry
// goes to the next server.
type Untried []*proxy.Peer

// Pick returns the first peer not tried yet.
func (p Untried) Pick(s *proxy.Session) (*proxy.Peer, error) {
	for _, x := range p {
		if !s.Tried(x.Addr) {
			return x, nil
		}
	}
	return p[0], nil
}
