package membership

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Retry-join: Config.RetryJoin lists where other members gossip, as
// addresses or DNS names, with or without a port (default: this node's own
// gossip port, since replicas share their flags). Every attempt resolves
// each name again (A and AAAA; a name starting with "_", such as
// _raftlock._tcp.svc.example, is looked up as an SRV record, whose targets
// and ports are used), so a Kubernetes headless Service or a Compose service
// name, whose addresses change as replicas come and go, is all a node needs.
// Addresses of this node itself are skipped. Attempts go on with backoff
// (1s doubling to 30s) until gossip with at least one other member succeeds;
// from then on serf keeps the membership, and reconnects to failed members.

const (
	retryJoinFirstPause = time.Second
	retryJoinMaxPause   = 30 * time.Second
)

func (mgr *Manager) retryJoin() {
	ctx, cancel := mgr.closingContext()
	defer cancel()
	pause := retryJoinFirstPause
	lastSaid := time.Time{}
	for attempt := 1; ; attempt++ {
		addrs, resolveErrs := mgr.resolveRetryJoin(ctx)
		var err error
		if len(addrs) > 0 {
			var joined int
			joined, err = mgr.gossip.serf.Join(addrs, true)
			if joined > 0 {
				mgr.log.Info("joined gossip", "contacted", joined, "addrs", addrs, "attempt", attempt)
				return
			}
		}
		if mgr.closed() {
			return
		}
		if time.Since(lastSaid) >= rejoinReportEvery || attempt <= 3 {
			lastSaid = time.Now()
			args := []any{"retry_join", mgr.cfg.RetryJoin, "resolved", addrs, "attempt", attempt, "next_in", pause}
			if err != nil {
				args = append(args, "error", strings.Join(strings.Fields(err.Error()), " "))
			}
			if len(resolveErrs) > 0 {
				args = append(args, "resolve_errors", strings.Join(resolveErrs, "; "))
			}
			args = append(args, "what_to_do", "start the other members, or check -retry-join's names and the gossip port; "+
				"a member that refuses this node logs why (another -cluster-name, another -gossip-key-file, a duplicate -node-id)")
			mgr.log.Warn("no gossip member reached yet; retrying", args...)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, retryJoinMaxPause)
	}
}

// resolveRetryJoin turns Config.RetryJoin into gossip addresses (ip:port),
// without duplicates or this node's own.
func (mgr *Manager) resolveRetryJoin(ctx context.Context) (addrs []string, errs []string) {
	_, ownPort, _ := SplitGossipAddr(*mgr.gossip.self.Load())
	self := *mgr.gossip.self.Load()
	bindHost, _, _ := SplitGossipAddr(mgr.cfg.GossipBindAddr)
	wildcard := bindHost == "" || net.ParseIP(bindHost).IsUnspecified()
	isSelf := func(ip net.IP, port int) bool {
		if net.JoinHostPort(ip.String(), strconv.Itoa(port)) == self {
			return true
		}
		// Bound to every interface: any local address at our port is us.
		return wildcard && port == ownPort && (ip.IsLoopback() || isLocalIP(ip))
	}
	add := func(ip net.IP, port int) {
		if isSelf(ip, port) {
			return
		}
		a := net.JoinHostPort(ip.String(), strconv.Itoa(port))
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, entry := range mgr.cfg.RetryJoin {
		entry = strings.TrimSpace(entry)
		host, port := entry, ownPort
		if h, p, err := net.SplitHostPort(entry); err == nil {
			host = h
			if port, err = strconv.Atoi(p); err != nil {
				errs = append(errs, entry+": bad port")
				continue
			}
		}
		if strings.HasPrefix(host, "_") {
			_, srvs, err := net.DefaultResolver.LookupSRV(rctx, "", "", host)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			for _, srv := range srvs {
				ips, err := net.DefaultResolver.LookupIP(rctx, "ip", strings.TrimSuffix(srv.Target, "."))
				if err != nil {
					errs = append(errs, err.Error())
					continue
				}
				for _, ip := range ips {
					add(ip, int(srv.Port))
				}
			}
			continue
		}
		if ip := net.ParseIP(host); ip != nil {
			add(ip, port)
			continue
		}
		ips, err := net.DefaultResolver.LookupIP(rctx, "ip", host)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		for _, ip := range ips {
			add(ip, port)
		}
	}
	return addrs, errs
}

// isLocalIP reports whether ip is an address of this host.
func isLocalIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	return slices.ContainsFunc(addrs, func(a net.Addr) bool {
		ipn, ok := a.(*net.IPNet)
		return ok && ipn.IP.Equal(ip)
	})
}
