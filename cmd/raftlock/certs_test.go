package main

import (
	"crypto/x509"
	"testing"

	"github.com/raftlock/raftlock/internal/testpki"
)

// testCA is a throwaway certificate authority whose files live in a test's
// temporary directory.
type testCA struct {
	*testpki.CA
	dir    string
	CAFile string
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	ca := &testCA{CA: testpki.NewCA(t, name), dir: t.TempDir()}
	ca.CAFile = ca.WriteCA(t, ca.dir, name+"-ca.pem")
	return ca
}

// issue writes a certificate for 127.0.0.1 (IP SAN), good for servers and
// clients, and its key; usages narrows it (default: both).
func (ca *testCA) issue(t *testing.T, name string, usages ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	return testpki.WriteCert(t, ca.dir, name, ca.Issue(t, name, usages...))
}

// peerFlags are the agent flags for mutual TLS with a certificate named name.
func (ca *testCA) peerFlags(t *testing.T, name string) []string {
	cert, key := ca.issue(t, name)
	return []string{"-peer-cert-file", cert, "-peer-key-file", key, "-peer-ca-file", ca.CAFile}
}
