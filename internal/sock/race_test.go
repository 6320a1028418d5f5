//go:build race

package sock

const raceEnabled = true
