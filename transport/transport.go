package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/internal/connlimit"
)

// Handler serves one RPC request. It runs on its own goroutine, so a slow
// request (a waiting acquire) never blocks others on the same connection.
// ctx is cancelled when the caller's context ends (the caller sends a cancel
// frame), the connection drops, or the transport closes; Close waits for
// handlers to return, so a handler must return soon after ctx is done. A
// returned error reaches the caller as ErrRemote. The handler may keep req;
// it must not modify the slice it returns. A panic in a handler is recovered,
// logged, and reported to the caller as ErrRemote.
type Handler func(ctx context.Context, req []byte) ([]byte, error)

// Config configures a Transport. Zero fields take the defaults noted.
type Config struct {
	BindAddr      string        // "127.0.0.1:0" picks a free port
	AdvertiseAddr string        // what peers dial; default: the bound address. A missing or zero port means the bound port
	Logger        hclog.Logger  // used as given (name it, e.g. Named("transport")); default: hclog.NewNullLogger()
	DialTimeout   time.Duration // default 2s
	// HeaderTimeout bounds the start of an accepted connection: its kind
	// byte (and TLS handshake), then its first raft byte or first RPC frame,
	// each within this of the accept. Default 5s.
	HeaderTimeout time.Duration
	MaxIdleConns  int // pooled RPC conns per peer; default 2
	// IdleTimeout closes an accepted RPC connection on which no request has
	// run for this long; the dialling side closes its own pooled connections
	// after half of it without a call, so that the server's close never races
	// a request. Raft's connections are not bounded: raft's pool legitimately
	// keeps them idle, and its dialling side has deadlines of its own.
	// Default 5m.
	IdleTimeout time.Duration
	// MaxConns bounds the accepted connections open at once (raft and RPC,
	// those still in their header phase included): beyond it, new ones wait
	// in the kernel's backlog until one closes, and a warning is logged at
	// most once a minute. A healthy cluster needs a few per peer. Default 512.
	MaxConns int
	// ServerTLS and ClientTLS, when set, wrap every accepted and dialled
	// connection (raft and RPC alike). Both or neither. When
	// ClientTLS.ServerName is empty, the host part of the dialled address is
	// verified, as tls.Dial does.
	ServerTLS *tls.Config
	ClientTLS *tls.Config
	// Dial, when set, opens every outgoing TCP connection, raft's and the
	// RPC's, in place of a net.Dialer (as net/http.Transport.DialContext
	// does): TLS and the transport's framing run over what it returns. It
	// must honour ctx, which carries DialTimeout. Tests use it to inject
	// faults; it also suits proxies and custom dialers. Nil: net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Listen, when set, opens the listener in place of net.Listen, with
	// network "tcp" and BindAddr; TLS runs over the connections it accepts.
	// Nil: net.Listen.
	Listen func(network, addr string) (net.Listener, error)
}

const (
	defaultDialTimeout   = 2 * time.Second
	defaultHeaderTimeout = 5 * time.Second
	defaultMaxIdleConns  = 2
	defaultIdleTimeout   = 5 * time.Minute
	defaultMaxConns      = 512
)

// withDefaults validates cfg and fills its zero fields.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = defaultHeaderTimeout
	}
	if cfg.MaxIdleConns <= 0 {
		cfg.MaxIdleConns = defaultMaxIdleConns
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = defaultIdleTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = defaultMaxConns
	}
	if (cfg.ServerTLS == nil) != (cfg.ClientTLS == nil) {
		return cfg, errors.New("transport: set both ServerTLS and ClientTLS, or neither")
	}
	if s := cfg.ServerTLS; s != nil && len(s.Certificates) == 0 && s.GetCertificate == nil && s.GetConfigForClient == nil {
		return cfg, errors.New("transport: ServerTLS has no certificate")
	}
	return cfg, nil
}

// Transport is one TCP listener per node, demultiplexed by the first byte of
// each connection: raft's stream layer, or the pipelined RPC. All methods
// may be called concurrently.
type Transport struct {
	cfg     Config
	logger  hclog.Logger
	ln      net.Listener
	addr    net.Addr
	handler atomic.Pointer[Handler]

	ctx    context.Context // cancelled by Close: aborts dials, ends handler contexts
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the transport starts; Close waits for them

	raftAccept chan net.Conn      // unbuffered: hands each raft conn straight to raft's Accept
	conns      *connlimit.Limiter // MaxConns accepted connections still open
	raftDone   chan struct{}      // closed when the raft side closes

	mu          sync.Mutex // protects the fields below
	closed      bool
	raftClosed  bool
	peers       map[string]*peerPool
	headerConns map[net.Conn]struct{} // accepted, first byte not read yet
	rpcConns    map[rpcConn]struct{}  // RPC conns of either side
	raftConns   map[*raftConn]struct{}
}

// rpcConn is either end of an RPC connection, as Close sees it.
type rpcConn interface {
	shutdown(cause error)
}

// Listen binds and starts accepting.
func Listen(cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	listen := cfg.Listen
	if listen == nil {
		listen = net.Listen
	}
	ln, err := listen("tcp", cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen: %w", err)
	}
	addr, err := advertised(cfg.AdvertiseAddr, ln.Addr().(*net.TCPAddr))
	if err != nil {
		ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		cfg:         cfg,
		logger:      cfg.Logger,
		ln:          ln,
		addr:        addr,
		ctx:         ctx,
		cancel:      cancel,
		raftAccept:  make(chan net.Conn),
		raftDone:    make(chan struct{}),
		peers:       make(map[string]*peerPool),
		headerConns: make(map[net.Conn]struct{}),
		rpcConns:    make(map[rpcConn]struct{}),
		raftConns:   make(map[*raftConn]struct{}),
	}
	t.conns = connlimit.New(cfg.MaxConns, func(waits int) {
		t.logger.Warn("peer connection limit reached: new connections wait until one closes; "+
			"something is opening connections to the raft port and leaving them open (a peer with many pools, a scanner): find it, or raise the limit",
			"limit", cfg.MaxConns, "addr", ln.Addr().String(), "times", waits, "since", connlimit.WarnEvery)
	})
	t.wg.Go(t.acceptLoop)
	return t, nil
}

// advertised works out the address peers dial: adv, or the bound address,
// with the bound port when adv has none.
func advertised(adv string, bound *net.TCPAddr) (net.Addr, error) {
	if adv == "" {
		if bound.IP.IsUnspecified() {
			return nil, fmt.Errorf("transport: bound address %s cannot be dialled by peers; set AdvertiseAddr", bound)
		}
		return bound, nil
	}
	host, port, err := net.SplitHostPort(adv)
	if err != nil {
		return nil, fmt.Errorf("transport: AdvertiseAddr %q: %w", adv, err)
	}
	if port == "" || port == "0" {
		port = strconv.Itoa(bound.Port)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("transport: AdvertiseAddr %q: bad port", adv)
	}
	if host == "" {
		return nil, fmt.Errorf("transport: AdvertiseAddr %q has no host", adv)
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsUnspecified() {
			return nil, fmt.Errorf("transport: AdvertiseAddr %q cannot be dialled by peers", adv)
		}
		return &net.TCPAddr{IP: ip, Port: int(p)}, nil
	}
	return hostAddr(net.JoinHostPort(host, port)), nil
}

// hostAddr is an advertised address with a DNS name rather than an IP.
type hostAddr string

func (a hostAddr) Network() string { return "tcp" }
func (a hostAddr) String() string  { return string(a) }

// Addr is the address peers should dial (advertised, with the real port).
func (t *Transport) Addr() net.Addr { return t.addr }

// Handle sets the RPC handler; nil removes it. Requests that arrive while
// there is no handler are answered with an error (ErrRemote for the caller).
func (t *Transport) Handle(h Handler) {
	if h == nil {
		t.handler.Store(nil)
		return
	}
	t.handler.Store(&h)
}

// Close stops the listener and closes every connection, raft's included;
// in-flight calls end with ErrClosed and handler contexts are cancelled.
// It returns once every goroutine the transport started has ended, which
// includes running handlers. Calling it again is harmless.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		return nil
	}
	t.closed = true
	headers := slices.Collect(maps.Keys(t.headerConns))
	conns := slices.Collect(maps.Keys(t.rpcConns))
	t.mu.Unlock()

	t.cancel()
	err := t.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	t.closeRaft()
	for _, nc := range headers {
		nc.Close()
	}
	for _, c := range conns {
		c.shutdown(ErrClosed)
	}
	t.wg.Wait()
	if err != nil {
		return fmt.Errorf("transport: close listener: %w", err)
	}
	return nil
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// spawn runs f on a goroutine Close waits for, unless the transport is
// closed. For goroutines started by callers' goroutines (those started by
// the transport's own goroutines use wg directly, since the count is then
// known to be above zero).
func (t *Transport) spawn(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Go(f)
	return true
}

func (t *Transport) acceptLoop() {
	const maxBackoff = time.Second
	var backoff time.Duration
	for {
		if !t.conns.Take(t.ctx.Done()) {
			return
		}
		nc, err := t.ln.Accept()
		if err != nil {
			t.conns.Give()
			if t.isClosed() {
				return
			}
			// Out of file descriptors and the like: wait and retry, as
			// net/http does, instead of spinning or giving up.
			backoff = min(max(2*backoff, 5*time.Millisecond), maxBackoff)
			t.logger.Error("accept failed", "error", err, "retry_in", backoff,
				"what_to_do", "if it says too many open files, raise the open-files limit (ulimit -n) or find who holds the connections")
			select {
			case <-time.After(backoff):
				continue
			case <-t.ctx.Done():
				return
			}
		}
		backoff = 0
		nc = t.conns.Conn(nc) // TLS, raft and the RPC all close down to it
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			nc.Close()
			return
		}
		t.headerConns[nc] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serveConn(nc)
	}
}

// replayConn is a raft connection whose first byte serveConn read already
// (to bound how long it may take): Read gives it back first. Only raft's
// connection goroutine reads it.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// errSilent marks a connection closed for not talking: no first frame in
// time, or (RPC) idle past IdleTimeout. Port probes and pooled connections
// do that; it is logged at debug level.
var errSilent = errors.New("silent connection")

// serveConn reads the first byte of an accepted connection and routes it.
// Every incoming connection passes through here.
//
// The read deadline set here also bounds what follows the kind byte: raft
// never bounds a read on an accepted connection, and the RPC server waits
// for frames, so a connection that sent 'R' or 'F' and then nothing would
// otherwise hold its goroutines forever. For raft, serveConn reads the first
// byte of raft's own protocol under it before handing the connection over;
// the RPC's reader clears it after the first frame.
func (t *Transport) serveConn(raw net.Conn) {
	defer t.wg.Done()
	nc := raw
	if t.cfg.ServerTLS != nil {
		nc = tls.Server(raw, t.cfg.ServerTLS)
	}
	var kind [1]byte
	err := raw.SetDeadline(time.Now().Add(t.cfg.HeaderTimeout))
	if err == nil {
		// With TLS this read runs the handshake, under the same deadline.
		_, err = io.ReadFull(nc, kind[:])
	}
	if err == nil {
		err = raw.SetWriteDeadline(time.Time{}) // the read deadline stays, see above
	}

	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	var raftFirst [1]byte
	if err == nil && !closed && kind[0] == kindRaft && !t.raftIsClosed() {
		// Still in headerConns, so Close does not wait for this read.
		if _, err = io.ReadFull(nc, raftFirst[:]); err == nil {
			err = raw.SetReadDeadline(time.Time{})
		} else {
			err = fmt.Errorf("%w: nothing after the raft kind byte: %w", errSilent, err)
		}
	}
	t.untrackHeader(raw)
	t.mu.Lock()
	closed = closed || t.closed
	t.mu.Unlock()
	if err != nil || closed {
		nc.Close()
		switch {
		case closed:
		case errors.Is(err, io.EOF) && !errors.Is(err, errSilent):
			// Port probes and health checks connect and leave: not worth a warning.
			t.logger.Debug("connection closed before its first byte", "remote", raw.RemoteAddr())
		case errors.Is(err, errSilent), errors.Is(err, os.ErrDeadlineExceeded):
			t.logger.Debug("dropped connection: it sent nothing in time", "remote", raw.RemoteAddr(), "header_timeout", t.cfg.HeaderTimeout, "error", err)
		default:
			t.logger.Warn("dropped connection: no valid first byte", "remote", raw.RemoteAddr(), "error", err,
				"what_to_do", "if remote is a member, give it the same peer TLS settings as this node")
		}
		return
	}
	switch kind[0] {
	case kindRaft:
		t.handOffRaft(&replayConn{Conn: nc, pending: raftFirst[:]})
	case kindRPC:
		t.serveRPC(nc)
	default:
		nc.Close()
		t.logger.Warn("dropped connection: unknown first byte", "remote", raw.RemoteAddr(), "byte", fmt.Sprintf("%#02x", kind[0]),
			"what_to_do", "only raftlock members dial this port: point HTTP clients at the agent's -http address")
	}
}

func (t *Transport) untrackHeader(raw net.Conn) {
	t.mu.Lock()
	delete(t.headerConns, raw)
	t.mu.Unlock()
}

// dial opens a connection of the given kind to addr: TCP (through
// Config.Dial when set), then TLS when configured, then the kind byte. Every
// outgoing connection, raft's and the RPC's, goes through here.
func (t *Transport) dial(ctx context.Context, addr string, kind byte) (net.Conn, error) {
	dial := t.cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg := t.cfg.ClientTLS; cfg != nil {
		if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				nc.Close()
				return nil, err
			}
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		nc = tc
	}
	if deadline, ok := ctx.Deadline(); ok {
		err = nc.SetWriteDeadline(deadline)
	}
	if err == nil {
		_, err = nc.Write([]byte{kind})
	}
	if err == nil {
		err = nc.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// trackRPC registers c so that Close reaches it; false when closed.
func (t *Transport) trackRPC(c rpcConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.rpcConns[c] = struct{}{}
	return true
}

func (t *Transport) untrackRPC(c rpcConn) {
	t.mu.Lock()
	delete(t.rpcConns, c)
	t.mu.Unlock()
}

// logConnEnd writes the one log line for an RPC connection that ended.
func (t *Transport) logConnEnd(side, peer string, cause error) {
	switch {
	case errors.Is(cause, errProtocol):
		t.logger.Warn("dropped connection: bad frame", "side", side, "remote", peer, "error", cause,
			"what_to_do", "run the same raftlock version on every member")
	case errors.Is(cause, ErrClosed), errors.Is(cause, io.EOF), errors.Is(cause, net.ErrClosed), errors.Is(cause, errSilent):
		t.logger.Debug("connection closed", "side", side, "remote", peer, "cause", cause)
	default:
		t.logger.Info("connection lost", "side", side, "remote", peer, "error", cause)
	}
}

// StreamLayer is the raft side; pass it to raft.NewNetworkTransport(WithConfig).
// Its Close, which raft's NetworkTransport.Close calls, closes the raft side
// only: Accept and Dial then fail with ErrClosed and every raft connection is
// closed (ending raft's connection goroutines), but the listener and the RPC
// stay up, because a node may still answer RPCs while raft shuts down.
// Transport.Close closes everything. The raft side cannot be reopened: a
// restarted raft needs a new Transport.
func (t *Transport) StreamLayer() raft.StreamLayer { return streamLayer{t} }
