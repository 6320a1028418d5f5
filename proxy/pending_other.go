//go:build !unix

package proxy

// pending: no peek here; a draining server closes a waiting connection
// whatever it holds.
func (c *conn) pending() bool { return false }
