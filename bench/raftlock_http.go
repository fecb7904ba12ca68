package main

import (
	"context"
	"net"
	"net/http"
	"sync"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/apiserver"
	"github.com/raftlock/raftlock/lock"
)

// raftlockHTTPSystem is the raftlock system with each node's HTTP API served
// (apiserver.Handler on 127.0.0.1:0, as the agent serves it) and every client
// a Go api.Client of one node, as programs that talk to agents use it. The
// nodes, the servers and the clients share this process, as the embedded
// system's nodes and clients do, so the difference between the two is what
// the HTTP path costs in CPU.
type raftlockHTTPSystem struct {
	*raftlockSystem
	servers  []*http.Server // nil once killed
	handlers []*apiserver.Handler
	urls     []string
	shared   []*api.Client // one per node, shared by its clients (unless -http-client-each)
}

func newRaftlockHTTP(p params) *raftlockHTTPSystem {
	return &raftlockHTTPSystem{raftlockSystem: newRaftlock(p)}
}

func (s *raftlockHTTPSystem) name() string { return sysRaftlockHTTP }

func (s *raftlockHTTPSystem) notes() []string {
	clients := "the clients of one node share one api.Client (an application's goroutines sharing its client, as the embedded system's clients share their node), each wrapped in a lock.Client"
	if s.p.httpClientEach {
		clients = "each client has an api.Client of its own (-http-client-each: one process per client), wrapped in a lock.Client"
	}
	return append([]string{
		"the raftlock system's 3 nodes, each serving its HTTP API (apiserver.NewHandler, apiserver.NewServer) on loopback in the same process; " +
			clients + "; so the difference to raftlock is what the HTTP path costs (JSON, net/http, loopback TCP, goroutines)",
	}, s.note...)
}

func (s *raftlockHTTPSystem) start(ctx context.Context) error {
	if err := s.raftlockSystem.start(ctx); err != nil {
		return err
	}
	s.servers, s.handlers, s.urls = nil, nil, nil
	for _, n := range s.nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		h := apiserver.NewHandler(n, apiserver.Config{})
		srv := apiserver.NewServer(ln.Addr().String(), h)
		go srv.Serve(ln)
		s.servers = append(s.servers, srv)
		s.handlers = append(s.handlers, h)
		s.urls = append(s.urls, "http://"+ln.Addr().String())
	}
	return nil
}

func (s *raftlockHTTPSystem) stop() {
	for _, c := range s.shared {
		if c != nil {
			c.Close()
		}
	}
	s.shared = nil
	s.stopServers()
	s.raftlockSystem.stop()
}

func (s *raftlockHTTPSystem) stopServers() {
	var wg sync.WaitGroup
	for i, srv := range s.servers {
		if srv != nil {
			wg.Go(func() {
				srv.Close()
				closeStreams(s.handlers[i])
			})
		}
	}
	wg.Wait()
	s.servers = nil
}

// closeStreams ends a handler's streams at once, as a node's crash would:
// net/http's Close does not know of them.
func closeStreams(h *apiserver.Handler) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = h.CloseStreams(ctx)
}

func (s *raftlockHTTPSystem) kill(i int) error {
	if srv := s.servers[i]; srv != nil {
		s.servers[i] = nil
		srv.Close()
		closeStreams(s.handlers[i])
	}
	return s.raftlockSystem.kill(i)
}

func (s *raftlockHTTPSystem) client(_ context.Context, member int) (client, error) {
	if !s.p.httpClientEach {
		if s.shared == nil {
			s.shared = make([]*api.Client, len(s.urls))
		}
		if s.shared[member] == nil {
			c, err := s.newAPIClient(member)
			if err != nil {
				return nil, err
			}
			s.shared[member] = c
		}
		return &raftlockHTTPClient{raftlockClient: raftlockClient{c: lock.New(s.shared[member]), ttl: s.p.ttl}}, nil
	}
	c, err := s.newAPIClient(member)
	if err != nil {
		return nil, err
	}
	return &raftlockHTTPClient{api: c, raftlockClient: raftlockClient{c: lock.New(c), ttl: s.p.ttl}}, nil
}

func (s *raftlockHTTPSystem) newAPIClient(member int) (*api.Client, error) {
	return api.NewClient(s.urls[member], api.ClientConfig{})
}

func (s *raftlockHTTPSystem) held(context.Context, int, func()) (map[string]float64, error) {
	return nil, &notApplicable{"the held state is the raftlock system's; the HTTP path adds nothing to it"}
}

type raftlockHTTPClient struct {
	raftlockClient
	api *api.Client
}

func (c *raftlockHTTPClient) close() {
	if c.api != nil {
		c.api.Close()
	}
}
