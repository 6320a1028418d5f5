// Package clock reads the time for deadlines and durations at half the cost
// of time.Now.
//
// time.Now reads two clocks, the wall clock and the monotonic one. Every
// request reads the time a dozen times (deadlines, try durations, pool idle
// ages, balancer latencies), and on virtual machines each read can cost as
// much as a small system call. Now reads only the monotonic clock and adds
// it to one wall reading taken at start.
package clock

import "time"

var epoch = time.Now()

// Now returns the current time, read from the monotonic clock alone. It
// carries a monotonic reading, so comparisons, Sub, Since and deadlines
// behave as with time.Now. Its wall reading is the process's start plus the
// monotonic time since: it parts from the system clock when that is set or
// slewed, so it is not for timestamps shown to people.
func Now() time.Time {
	return epoch.Add(time.Since(epoch))
}
