//go:build race

package observe

const raceEnabled = true
