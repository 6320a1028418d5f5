// Package epoll is an epoll set that a goroutine waits on through Go's
// poller, for the watchers that follow many idle sockets at once (the
// pool's idle upstream connections, the proxy's parked clients).
//
// A goroutine that calls epoll_wait(2) with a timeout keeps its P, the
// scheduler's right to run Go code, for as long as the call blocks: until
// sysmon notices and hands the P to another thread, 10–20 ms on the
// project machine. With GOMAXPROCS=1 every goroutine stalls that long,
// each time a watcher goes back to waiting. An epoll descriptor is itself
// readable while events are ready in it, so Set registers it with Go's
// poller: Wait parks the goroutine there, and epoll_wait is only ever
// called with a zero timeout.
//
// Wake ends a Wait from another goroutine, and a wake-up made between two
// Waits is kept for the next. It exists on Linux only; elsewhere the
// package is empty.
package epoll
