//go:build !linux

package spare

import "net"

// Spare holds no descriptor here: the accept loop backs off when it runs
// out, as net/http's does.
type Spare struct{}

// Hold returns nil.
func Hold() *Spare { return nil }

func (*Spare) Hold()                         {}
func (*Spare) Release()                      {}
func (*Spare) Shed(net.Listener, []byte) int { return 0 }
