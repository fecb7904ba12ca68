package transport

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newNetworkTransport(t *testing.T, tr *Transport) *raft.NetworkTransport {
	t.Helper()
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  tr.StreamLayer(),
		MaxPool: 2,
		Timeout: 5 * time.Second,
		Logger:  hclog.NewNullLogger(),
	})
	t.Cleanup(func() { nt.Close() })
	return nt
}

// serveOneAppendEntries answers the first RPC raft delivers on nt.
func serveOneAppendEntries(ctx context.Context, nt *raft.NetworkTransport, got chan<- *raft.AppendEntriesRequest) {
	select {
	case rpc := <-nt.Consumer():
		req, _ := rpc.Command.(*raft.AppendEntriesRequest)
		got <- req
		rpc.Respond(&raft.AppendEntriesResponse{Term: 7, LastLog: 42, Success: true}, nil)
	case <-ctx.Done():
	}
}

// A raft.NetworkTransport pair exchanges an AppendEntries over the stream
// layer, in plaintext and over TLS, while the RPC shares the port.
func TestStreamLayerCarriesAppendEntries(t *testing.T) {
	serverTLS, clientTLS := selfSignedTLS(t)
	for name, cfg := range map[string]Config{
		"plaintext": {},
		"tls":       {ServerTLS: serverTLS, ClientTLS: clientTLS},
	} {
		t.Run(name, func(t *testing.T) {
			requireNoLeaks(t)
			a, b := listen(t, cfg), listen(t, cfg)
			b.Handle(echo)
			ntA, ntB := newNetworkTransport(t, a), newNetworkTransport(t, b)
			assert.Equal(t, raft.ServerAddress(b.Addr().String()), ntB.LocalAddr())

			got := make(chan *raft.AppendEntriesRequest, 1)
			ctx := testCtx(t)
			go serveOneAppendEntries(ctx, ntB, got)

			req := &raft.AppendEntriesRequest{
				RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte(a.Addr().String())},
				Term:      7,
				Entries:   []*raft.Log{{Index: 42, Term: 7, Type: raft.LogCommand, Data: []byte("acquire")}},
			}
			var resp raft.AppendEntriesResponse
			require.NoError(t, ntA.AppendEntries("b", ntB.LocalAddr(), req, &resp))
			assert.True(t, resp.Success)
			assert.Equal(t, uint64(42), resp.LastLog)
			received := <-got
			require.NotNil(t, received)
			require.Len(t, received.Entries, 1)
			assert.Equal(t, "acquire", string(received.Entries[0].Data))

			// The RPC works on the same port at the same time.
			out, err := a.Call(ctx, b.Addr().String(), []byte("ping"))
			require.NoError(t, err)
			assert.Equal(t, "ping", string(out))

			// raft shuts down first, then the transports.
			require.NoError(t, ntA.Close())
			require.NoError(t, ntB.Close())
			require.NoError(t, a.Close())
			require.NoError(t, b.Close())
		})
	}
}

// listFSM records applied commands.
type listFSM struct {
	mu      sync.Mutex // protects applied
	applied []string
}

func (f *listFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, string(l.Data))
	return nil
}

func (f *listFSM) Snapshot() (raft.FSMSnapshot, error) { return emptySnapshot{}, nil }
func (f *listFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

func (f *listFSM) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.applied...)
}

type emptySnapshot struct{}

func (emptySnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (emptySnapshot) Release()                             {}

// A real 3-node raft cluster over the stream layer elects a leader and
// replicates a command to every node.
func TestRaftClusterOverStreamLayer(t *testing.T) {
	requireNoLeaks(t)
	const n = 3
	var (
		rafts  [n]*raft.Raft
		fsms   [n]*listFSM
		trs    [n]*Transport
		config raft.Configuration
	)
	for i := range n {
		trs[i] = listen(t, Config{})
		config.Servers = append(config.Servers, raft.Server{
			ID:      raft.ServerID(fmt.Sprint("node", i)),
			Address: raft.ServerAddress(trs[i].Addr().String()),
		})
	}
	for i := range n {
		conf := raft.DefaultConfig()
		conf.LocalID = config.Servers[i].ID
		conf.HeartbeatTimeout = 100 * time.Millisecond
		conf.ElectionTimeout = 100 * time.Millisecond
		conf.LeaderLeaseTimeout = 100 * time.Millisecond
		conf.CommitTimeout = 5 * time.Millisecond
		conf.Logger = hclog.NewNullLogger()
		store := raft.NewInmemStore()
		fsms[i] = &listFSM{}
		nt := newNetworkTransport(t, trs[i])
		if i == 0 {
			require.NoError(t, raft.BootstrapCluster(conf, store, store, raft.NewInmemSnapshotStore(), nt, config))
		}
		r, err := raft.NewRaft(conf, fsms[i], store, store, raft.NewInmemSnapshotStore(), nt)
		require.NoError(t, err)
		rafts[i] = r
		t.Cleanup(func() { r.Shutdown().Error() })
	}

	var leader *raft.Raft
	require.Eventually(t, func() bool {
		for _, r := range rafts {
			if r.State() == raft.Leader {
				leader = r
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "no leader elected")
	require.NoError(t, leader.Apply([]byte("acquire job-42"), 5*time.Second).Error())
	for i, f := range fsms {
		assert.Eventually(t, func() bool { return len(f.list()) == 1 }, 5*time.Second, 5*time.Millisecond, "node %d", i)
		assert.Equal(t, []string{"acquire job-42"}, f.list())
	}

	// Shutting raft down closes the stream layers (raft side only) and every
	// raft connection; the transports then close cleanly.
	for _, r := range rafts {
		require.NoError(t, r.Shutdown().Error())
	}
	for _, tr := range trs {
		require.NoError(t, tr.Close())
	}
}

// Closing the stream layer (what NetworkTransport.Close does) ends the raft
// side for good but leaves the listener and the RPC serving.
func TestStreamLayerCloseKeepsRPCServing(t *testing.T) {
	requireNoLeaks(t)
	a, b := listen(t, Config{}), listen(t, Config{})
	a.Handle(echo)
	sl := a.StreamLayer()

	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := sl.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	out, err := b.StreamLayer().Dial(raft.ServerAddress(a.Addr().String()), time.Second)
	require.NoError(t, err)
	_, err = out.Write([]byte{0}) // raft writes its first message at once; a silent conn is never handed over
	require.NoError(t, err)
	in := <-accepted

	require.NoError(t, sl.Close())
	require.NoError(t, sl.Close(), "closing twice is harmless")
	_, err = sl.Accept()
	assert.ErrorIs(t, err, ErrClosed)
	_, err = sl.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	assert.ErrorIs(t, err, ErrClosed)
	requireClosedByPeer(t, out) // a closed the accepted end, so b's end sees EOF
	assert.Error(t, in.SetDeadline(time.Time{}), "the accepted raft conn is closed")

	// New raft connections to a are closed at once.
	late, err := b.StreamLayer().Dial(raft.ServerAddress(a.Addr().String()), time.Second)
	require.NoError(t, err)
	requireClosedByPeer(t, late)
	late.Close()

	resp, err := b.Call(testCtx(t), a.Addr().String(), []byte("rpc still up"))
	require.NoError(t, err)
	assert.Equal(t, "rpc still up", string(resp))
}
