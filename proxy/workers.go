package proxy

import "time"

// Connections are served by worker goroutines that outlive them: when a
// connection ends (or parks), its goroutine waits a while to serve the next
// one. A new connection then runs on a stack already grown to what serving
// a request needs, instead of a fresh one that grows, by copying, during
// its first request; and accept does not pay for a goroutine each time.
const (
	maxIdleWorkers = 64              // idle workers beyond this end at once
	workerIdle     = 5 * time.Second // an idle worker ends after this
)

// start serves c on an idle worker, or on a new one when none is waiting.
func (srv *Server) start(c *conn) {
	select {
	case srv.work <- c:
	default:
		go srv.worker(c)
	}
}

func (srv *Server) worker(c *conn) {
	var idle *time.Timer
	for {
		c.serve()
		if srv.idleWorkers.Add(1) > maxIdleWorkers {
			srv.idleWorkers.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case c = <-srv.work:
			srv.idleWorkers.Add(-1)
		case <-idle.C:
			srv.idleWorkers.Add(-1)
			return
		case <-srv.quit:
			srv.idleWorkers.Add(-1)
			return
		}
	}
}
