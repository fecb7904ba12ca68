//go:build !unix

package datadir

// Lock does nothing where flock is missing: running two nodes on one
// data dir is then the operator's mistake to avoid.
func Lock(string) (unlock func() error, err error) {
	return func() error { return nil }, nil
}
