//go:build !race

package accesslog

const raceEnabled = false
