//go:build !unix

package cluster

// lockDataDir does nothing where flock is missing: running two nodes on one
// data dir is then the operator's mistake to avoid.
func lockDataDir(string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}
