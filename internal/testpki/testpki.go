// Package testpki makes throwaway certificate authorities and certificates
// for tests: ECDSA P-256, valid for an hour either side of now, with
// 127.0.0.1 as IP SAN so that TLS to a loopback listener verifies. Only test
// files import it, so no program that embeds raftlock links it.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority that lives for one test.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	Pool *x509.CertPool // holds Cert alone
}

// NewCA makes a CA whose certificate names name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testpki: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testpki: CA certificate: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, Pool: pool}
}

// Issue signs a certificate named name for 127.0.0.1 with the given
// extended usages (none given: server and client).
func (ca *CA) Issue(t testing.TB, name string, usages ...x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	if len(usages) == 0 {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	key := newKey(t)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatalf("testpki: serial: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatalf("testpki: certificate %s: %v", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testpki: certificate %s: %v", name, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// WriteCA writes the CA's certificate as PEM to dir/file and returns the path.
func (ca *CA) WriteCA(t testing.TB, dir, file string) string {
	t.Helper()
	return writePEM(t, filepath.Join(dir, file), "CERTIFICATE", ca.Cert.Raw)
}

// WriteCert writes cert and its key as PEM to dir/<name>.pem and
// dir/<name>-key.pem and returns their paths.
func WriteCert(t testing.TB, dir, name string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatalf("testpki: key of %s: %v", name, err)
	}
	certFile = writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", cert.Certificate[0])
	keyFile = writePEM(t, filepath.Join(dir, name+"-key.pem"), "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testpki: key: %v", err)
	}
	return key
}

func writePEM(t testing.TB, path, kind string, der []byte) string {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testpki: %v", err)
	}
	return path
}
