package apiserver

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/raftlock/raftlock/internal/testpki"
)

// testCA is a throwaway certificate authority for one test.
type testCA struct {
	*testpki.CA
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	ca := testpki.NewCA(t, "raftlock test CA")
	return &testCA{CA: ca, pool: ca.Pool}
}

// issue signs a certificate for 127.0.0.1, good for servers and clients.
func (ca *testCA) issue(t testing.TB, name string) tls.Certificate { return ca.Issue(t, name) }
