package apiserver

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/raftlock/raftlock/api"
)

// guard keeps web pages in a browser away from the API. A node without a
// token (the default, and the agent's -dev) would otherwise take orders from
// any page its user opens:
//
//   - a page may POST to another origin without asking first (a "simple"
//     CORS request) when the Content-Type is text/plain, a form's or absent,
//     so every POST must say application/json, which a page can send only
//     after a CORS preflight that guard answers for allowed origins only;
//   - browsers send Origin with every cross-origin request but simple GETs
//     (and Sec-Fetch-Site with all of them), so a request from a page whose
//     origin is not allowed is refused, GETs included;
//   - DNS rebinding points a name of the attacker's at 127.0.0.1, making
//     the node same-origin with the attacker's page: the Host header then
//     carries the attacker's name, so a Host that is not one of the node's
//     names (or an IP address, or localhost, which rebinding cannot produce)
//     is refused.
//
// Programs (curl, the Go client, probes) send no Origin and their own Host,
// and pass.
type guard struct {
	origins  map[string]bool // allowed origins, normalized
	hosts    map[string]bool // allowed host names, normalized
	anyHost  bool            // AllowedHosts holds "*"
	problems []string        // entries of the Config that can never match, for NewHandler to log
}

func newGuard(cfg Config) guard {
	g := guard{origins: map[string]bool{}, hosts: map[string]bool{}}
	for _, o := range cfg.AllowedOrigins {
		n, err := normalizeOrigin(o)
		if err != nil {
			g.problems = append(g.problems, fmt.Sprintf("Config.AllowedOrigins: %v", err))
			continue
		}
		g.origins[n] = true
	}
	for _, h := range cfg.AllowedHosts {
		if h == "*" {
			g.anyHost = true
			continue
		}
		n, err := normalizeHost(h)
		if err != nil {
			g.problems = append(g.problems, fmt.Sprintf("Config.AllowedHosts: %v", err))
			continue
		}
		g.hosts[n] = true
	}
	return g
}

// ValidateAllowedOrigin reports why origin cannot be an entry of
// Config.AllowedOrigins, or nil. An origin is what browsers send in the
// Origin header: scheme://host, with :port unless it is the scheme's
// default, and nothing after (no path, no trailing slash).
func ValidateAllowedOrigin(origin string) error {
	_, err := normalizeOrigin(origin)
	return err
}

// ValidateAllowedHost reports why host cannot be an entry of
// Config.AllowedHosts, or nil: a DNS name (HOST, HOST:PORT or a URL; the
// port is ignored), or "*" for every name.
func ValidateAllowedHost(host string) error {
	if host == "*" {
		return nil
	}
	_, err := normalizeHost(host)
	return err
}

func normalizeOrigin(origin string) (string, error) {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q is not an origin like https://ops.example.com:8443 (scheme://host[:port], no path)", origin)
	}
	if u.Path == "/" {
		// Browsers never send the slash; accept it from a person, match without it.
		u.Path = ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// normalizeHost takes the host name out of a Host header, an address or a
// URL (port and IPv6 brackets dropped, lower case, no trailing dot).
func normalizeHost(hostport string) (string, error) {
	host := hostport
	if u, err := url.Parse(hostport); err == nil && u.Scheme != "" && u.Host != "" {
		host = u.Host // a URL, as -advertise-http takes
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" || strings.ContainsAny(host, "/ @?#*") {
		return "", fmt.Errorf("%q is not a host name like locks.example.com", hostport)
	}
	return host, nil
}

// hostAllowed reports whether a request's Host header may reach the API.
// IP addresses always may: DNS rebinding needs a name of the attacker's, and
// a probe or client that dials an IP sends that IP. So may localhost, which
// only this machine resolves. An empty Host (HTTP/1.0) carries no name.
func (g *guard) hostAllowed(hostHeader string) bool {
	if hostHeader == "" || g.anyHost {
		return true
	}
	host, err := normalizeHost(hostHeader)
	if err != nil {
		return false
	}
	if net.ParseIP(host) != nil || host == "localhost" {
		return true
	}
	if i := strings.LastIndexByte(host, '%'); i > 0 && net.ParseIP(host[:i]) != nil {
		return true // an IPv6 address with a zone
	}
	return g.hosts[host]
}

// check refuses what a browser page must not do, answers a CORS preflight
// from an allowed origin, and marks answers to allowed origins for the
// browser. done says the request was answered (refused or a preflight).
func (g *guard) check(w http.ResponseWriter, r *http.Request) (done bool) {
	if !g.hostAllowed(r.Host) {
		writeError(w, newAPIError(http.StatusForbidden, api.CodeHostNotAllowed,
			"api: Host %q is not a name of this node: a web page's DNS trick (rebinding) looks like this. "+
				"Reach the node by its IP address or localhost, or allow the name: raftlock agent -allowed-hosts, "+
				"or Config.AllowedHosts", r.Host))
		return true
	}
	origins := r.Header.Values("Origin")
	if len(origins) == 0 {
		// Browsers send Origin with every request a page could use to act
		// (anything but a plain GET or HEAD); Sec-Fetch-Site with all of
		// them. A cross-site one without Origin is a page's <img> or
		// <script>: no business of a page's.
		switch r.Header.Get("Sec-Fetch-Site") {
		case "cross-site", "same-site":
			writeError(w, newAPIError(http.StatusForbidden, api.CodeOriginNotAllowed,
				"api: a request from another site's web page (Sec-Fetch-Site: %s) is refused", r.Header.Get("Sec-Fetch-Site")))
			return true
		}
		return false
	}
	origin := origins[0]
	if len(origins) == 1 && sameOrigin(origin, r) {
		// The node's own page (the console at /ui/): its Host passed the
		// check above, so the page is this node's, not a rebinding one's.
		return false
	}
	n, err := normalizeOrigin(origin)
	if len(origins) > 1 || err != nil || !g.origins[n] {
		writeError(w, newAPIError(http.StatusForbidden, api.CodeOriginNotAllowed,
			"api: requests from web pages of origin %q are refused: allow it with raftlock agent -allowed-origins, "+
				"or Config.AllowedOrigins (programs send no Origin header)", strings.Join(origins, ", ")))
		return true
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", "GET, HEAD, POST")
		h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization, "+api.TokenHeader)
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}

// checkContentType refuses a POST whose body is not declared JSON: a web
// page can send text/plain, a form's types or none without a CORS
// preflight, but not application/json. A charset, if given, must be UTF-8.
func checkContentType(r *http.Request) *apiError {
	ct := r.Header.Values("Content-Type")
	if len(ct) == 1 {
		mt, params, err := mime.ParseMediaType(ct[0])
		cs, hasCharset := params["charset"]
		if err == nil && mt == "application/json" && (!hasCharset || strings.EqualFold(cs, "utf-8")) {
			return nil
		}
	}
	got := "none"
	if len(ct) > 0 {
		got = fmt.Sprintf("%q", strings.Join(ct, ", "))
	}
	return newAPIError(http.StatusUnsupportedMediaType, api.CodeUnsupportedMedia,
		"api: POST %s wants \"Content-Type: application/json\", got %s (curl: add -H 'Content-Type: application/json', or use --json)",
		r.URL.Path, got)
}

// sameOrigin reports whether origin is the request's own: its scheme and
// Host header, as a browser sends it for a page of this node.
func sameOrigin(origin string, r *http.Request) bool {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	own, err := normalizeOrigin(scheme + "://" + r.Host)
	if err != nil || r.Host == "" {
		return false
	}
	n, err := normalizeOrigin(origin)
	return err == nil && n == own
}
