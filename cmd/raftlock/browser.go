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

// allowedBrowsers checks -allowed-origins and -allowed-hosts and returns
// the apiserver.Config lists they amount to, before the agent's own host
// names are added to hosts (see ownHostNames).
func allowedBrowsers(allowedOrigins, allowedHosts string) (origins, hosts []string, err error) {
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
	return origins, hosts, nil
}

// ownHostNames are the host names the API may be reached by beyond
// -allowed-hosts, so that clients reaching the agent by any name it was
// given keep working: those in -http, -advertise-http (apiAddr), -advertise
// and the API certificate, and the machine's name when -http listens on
// every interface. IP addresses and localhost need no listing.
func ownHostNames(httpAddr, apiAddr, advertise string, apiTLS *tls.Config) []string {
	var hosts []string
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
	return hosts
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
