// Package ready reads a client connection's socket for the bytes of its
// next request without holding a read buffer while it waits: an idle
// keep-alive connection, or one whose request head comes a byte at a
// time, then costs its small structures, not a buffer each. It also reads
// what the socket holds now without waiting, for a request's rest that
// has come, a ClientHello, and the bytes a closing connection throws
// away. It is the waiting that package park builds on; on systems without
// raw socket reads it falls back to the net package's, which hold their
// buffer while they wait.
package ready
