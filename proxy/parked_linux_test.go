package proxy

// parkedConns returns how many connections srv's parker holds.
func parkedConns(srv *Server) int {
	p := srv.parker
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.due)
}
