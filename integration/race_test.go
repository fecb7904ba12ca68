//go:build race

package integration

// raceEnabled: this test binary runs with the race detector.
const raceEnabled = true
