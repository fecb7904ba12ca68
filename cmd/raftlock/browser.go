package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/raftlock/raftlock/apiserver"
)

// browserGuard checks -allowed-origins and -allowed-hosts and returns the
// apiserver.Config lists they amount to. The host names allowed are the agent's
// own, so that clients reaching it by any name it was given keep working:
// those in -http, -advertise-http (apiAddr), -advertise and the API
// certificate, the machine's name when -http listens on every interface,
// and -allowed-hosts. IP addresses and localhost need no listing.
func browserGuard(allowedOrigins, allowedHosts, httpAddr, apiAddr, advertise string, apiTLS *tls.Config) (origins, hosts []string, err error) {
	for _, o := range splitList(allowedOrigins) {
		if err := apiserver.ValidateAllowedOrigin(o); err != nil {
			return nil, nil, fmt.Errorf("-allowed-origins: %w", err)
		}
		origins = append(origins, o)
	}
	for _, h := range splitList(allowedHosts) {
		if err := apiserver.ValidateAllowedHost(h); err != nil {
			return nil, nil, fmt.Errorf("-allowed-hosts: %w (want names like locks.example.com, or * for any)", err)
		}
		hosts = append(hosts, h)
	}
	own := []string{hostOf(httpAddr), hostOf(apiAddr), hostOf(advertise)}
	if wildcardHost(hostOf(httpAddr)) {
		if name, err := os.Hostname(); err == nil {
			own = append(own, name)
		}
	}
	if apiTLS != nil {
		for _, c := range apiTLS.Certificates {
			if c.Leaf != nil {
				own = append(own, c.Leaf.DNSNames...)
			}
		}
	}
	for _, h := range own {
		// IPs pass anyway; a wildcard certificate name cannot be listed.
		if h == "" || net.ParseIP(strings.Trim(h, "[]")) != nil || strings.Contains(h, "*") || apiserver.ValidateAllowedHost(h) != nil {
			continue
		}
		hosts = append(hosts, h)
	}
	return origins, hosts, nil
}

// hostOf is the host of a HOST:PORT address or a URL ("" when it has none).
func hostOf(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.Scheme != "" && u.Host != "" {
		return u.Hostname()
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return host
}
