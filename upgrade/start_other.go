//go:build !unix

package upgrade

import (
	"context"
	"errors"
	"os"
	"time"
)

// Start: binary upgrades hand sockets over by descriptor number, which
// this system does not do; it always fails.
func Start(ctx context.Context, path string, args []string, sockets []Socket, timeout time.Duration) (*os.Process, error) {
	return nil, errors.New("upgrade: not supported on this system")
}
