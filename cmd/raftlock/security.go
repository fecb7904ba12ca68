package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
)

// peerTLS builds the mutual TLS of the raft port from -peer-cert-file,
// -peer-key-file and -peer-ca-file. Every node presents its certificate,
// both when it accepts and when it dials, and accepts a peer only with a
// certificate that the peer CA signed.
//
// The dialling side checks the chain against the CA, not the host name:
// nodes dial each other by whatever -advertise, -join and -peers say (most
// often an IP, and the leader's address travels inside raft), and the
// accepting side, like etcd's --peer-client-cert-auth, admits any
// certificate of the CA whatever name it bears, so whoever holds one can
// join the cluster anyway. Host names would add certificates to get wrong
// and no safety. The peer CA is thus the cluster's trust boundary: it must
// sign certificates for this cluster's nodes and nothing else (not a public
// CA, not a company-wide one).
func peerTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	cert, err := loadKeyPair("-peer-cert-file", certFile, "-peer-key-file", keyFile)
	if err != nil {
		return nil, nil, err
	}
	roots, err := loadCertPool("-peer-ca-file", caFile)
	if err != nil {
		return nil, nil, err
	}
	// The same certificate serves both ends: check it can, now, rather
	// than learn it from a failed handshake on another node.
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if err := verifyChain(cert.Certificate, roots, usage); err != nil {
			return nil, nil, fmt.Errorf("-peer-cert-file %s does not pass -peer-ca-file %s: %w", certFile, caFile, err)
		}
	}
	server = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    roots,
		// Both ends are raftlock agents: no older client to wait for.
		MinVersion: tls.VersionTLS13,
	}
	client = &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS13,
		// Not insecure: the standard check, which also matches the host
		// name, is replaced by VerifyConnection's check of the chain
		// against the peer CA (see above). VerifyConnection runs on every
		// handshake, resumed ones included.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("raftlock: the peer presented no certificate")
			}
			raw := make([][]byte, len(cs.PeerCertificates))
			for i, c := range cs.PeerCertificates {
				raw[i] = c.Raw
			}
			if err := verifyChain(raw, roots, x509.ExtKeyUsageServerAuth); err != nil {
				return fmt.Errorf("raftlock: the peer's certificate does not pass -peer-ca-file: %w", err)
			}
			return nil
		},
	}
	return server, client, nil
}

// verifyChain checks that chain (leaf first, DER) leads to roots and allows usage.
func verifyChain(chain [][]byte, roots *x509.CertPool, usage x509.ExtKeyUsage) error {
	if len(chain) == 0 {
		return errors.New("no certificate")
	}
	certs := make([]*x509.Certificate, len(chain))
	for i, der := range chain {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		certs[i] = c
	}
	intermediates := x509.NewCertPool()
	for _, c := range certs[1:] {
		intermediates.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// apiServerTLS is the HTTPS of the API from -cert-file, -key-file and,
// optionally, -client-ca-file (then every client must present a
// certificate of that CA, as with etcd's --client-cert-auth).
func apiServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := loadKeyPair("-cert-file", certFile, "-key-file", keyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pool, err := loadCertPool("-client-ca-file", clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = pool
	}
	return cfg, nil
}

func loadKeyPair(certFlag, certFile, keyFlag, keyFile string) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s %s, %s %s: %w", certFlag, certFile, keyFlag, keyFile, err)
	}
	return cert, nil
}

func loadCertPool(flagName, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", flagName, file)
	}
	return pool, nil
}

// allOrNone reports an error unless every one of the named flags is set or
// none is. values are the flags' values, in the order of names.
func allOrNone(names []string, values ...string) error {
	var set, missing []string
	for i, v := range values {
		if v != "" {
			set = append(set, "-"+names[i])
		} else {
			missing = append(missing, "-"+names[i])
		}
	}
	if len(set) > 0 && len(missing) > 0 {
		return fmt.Errorf("%s go together: %s given without %s", strings.Join(prefixAll(names), ", "), strings.Join(set, ", "), strings.Join(missing, ", "))
	}
	return nil
}

func prefixAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "-" + n
	}
	return out
}

// token returns the API token from a -NAME / -NAME-file pair of flags,
// which check must accept: apiserver.ValidateSecret for the agent's own
// (-http-token: one minimum for every secret the agent accepts, as for
// -http-acl-file's), api.ValidateToken for a client's (-token: only what a
// header can carry; the agent it talks to decides). When both are set, the
// one given on the command line wins over the one from the environment;
// both on the command line is a usage error. "" without either.
func token(fs *flagSet, name, value, fileName, file string, check func(string) error) (string, error) {
	if value != "" && file != "" {
		switch {
		case fs.onCommandLine[name] && !fs.onCommandLine[fileName]:
			file = ""
		case fs.onCommandLine[fileName] && !fs.onCommandLine[name]:
			value = ""
		default:
			return "", fmt.Errorf("give -%s or -%s, not both", name, fileName)
		}
	}
	from := "-" + name // the flag the value came from, for the error
	if file != "" {
		from = "-" + fileName + " " + file
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("-%s: %w", fileName, err)
		}
		// Files written by editors and `echo` end with a newline.
		value = strings.TrimSpace(string(b))
		if value == "" {
			return "", fmt.Errorf("-%s %s is empty", fileName, file)
		}
	}
	if value == "" {
		return "", nil // no token
	}
	if err := check(value); err != nil {
		return "", fmt.Errorf("%s: %w", from, err)
	}
	return value, nil
}

// apiURL is the URL clients should dial to reach this agent's HTTP API
// (cluster.Config.APIAddr): explicit (-advertise-http) when given, else
// the listener's bound address, with a wildcard host (0.0.0.0, ::) replaced
// by the host of advertise or else of bind, when either names one. It is
// "" when no dialable host is known.
func apiURL(explicit string, bound net.Addr, advertise, bind string, https bool) (string, error) {
	if explicit != "" {
		return advertisedAPIURL(explicit, https)
	}
	scheme := "http"
	if https {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", err
	}
	if wildcardHost(host) {
		host = ""
		for _, candidate := range []string{advertise, bind} {
			if h, _, err := net.SplitHostPort(candidate); err == nil && !wildcardHost(h) {
				host = h
				break
			}
		}
		if host == "" {
			return "", nil
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port), nil
}

// wildcardHost: listening there means every interface, and dialling it
// means nothing useful to another host.
func wildcardHost(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// advertisedAPIURL checks -advertise-http (explicit) and returns it as a
// URL, with https's scheme when it gives none.
func advertisedAPIURL(explicit string, https bool) (string, error) {
	scheme := "http"
	if https {
		scheme = "https"
	}
	raw := explicit
	if !strings.Contains(raw, "://") {
		raw = scheme + "://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("-advertise-http %q: %w", explicit, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("-advertise-http %q: scheme must be http or https", explicit)
	}
	if u.Host == "" || u.Hostname() == "" || wildcardHost(u.Hostname()) {
		return "", fmt.Errorf("-advertise-http %q: want a host clients can dial", explicit)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("-advertise-http %q: want scheme://host:port[/path] only", explicit)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}
