package proxy

import "time"

// Connections are served by goroutines that outlive them (see package
// workers): when a connection ends (or parks), its goroutine waits a while
// to serve the next one. A new connection then runs on a stack already
// grown to what serving a request needs, and accept does not pay for a
// goroutine each time. Shutdown ends the idle ones.
const (
	maxIdleWorkers = 64              // idle workers beyond this end at once
	workerIdle     = 5 * time.Second // an idle worker ends after this
)

// start serves c on an idle worker, or on a new one when none is waiting.
func (srv *Server) start(c *conn) { srv.workers.Go(c) }
