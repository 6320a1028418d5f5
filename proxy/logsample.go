package proxy

import (
	"sync"
	"time"
)

// logLinesPerSecond is how many lines a second a logSampler lets through:
// enough to see what is going on, few enough that a flood of the same
// failure (a slow-head attack, sluice out of descriptors) does not flood
// the log.
const logLinesPerSecond = 5

// logSampler lets up to logLinesPerSecond lines through in each second and
// counts the rest, to be told by the next line let through or, when none
// comes within the second, by a line of their own (flush). Its zero value
// is ready; it is safe for concurrent use.
type logSampler struct {
	mu      sync.Mutex
	second  time.Time // when the current second began
	lines   int       // let through in it
	leftOut int       // left out since the last line let through
	due     bool      // a flush is due at the end of the second
}

// take reports whether a line may be written now and, when it may, how
// many were left out before it. When it leaves the first line of a second
// out, report is how long until the caller should flush (0 otherwise).
func (ls *logSampler) take(now time.Time) (ok bool, leftOut int, report time.Duration) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if now.Sub(ls.second) >= time.Second {
		ls.second, ls.lines = now, 0
	}
	if ls.lines >= logLinesPerSecond {
		ls.leftOut++
		if !ls.due {
			ls.due = true
			report = max(ls.second.Add(time.Second).Sub(now), time.Millisecond)
		}
		return false, 0, report
	}
	ls.lines++
	leftOut, ls.leftOut = ls.leftOut, 0
	return true, leftOut, 0
}

// flush returns the number of lines left out and not yet told, and
// forgets them.
func (ls *logSampler) flush() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := ls.leftOut
	ls.leftOut, ls.due = 0, false
	return n
}
