package apiserver

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/lock"
)

const testToken = "s3cr3t-Token_with.all~the+b64/chars="

// sendWith is testNode.send with extra request headers.
func (n *testNode) sendWith(t *testing.T, method, path, body string, header http.Header) answer {
	t.Helper()
	req, err := http.NewRequest(method, n.url+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	a, err := decodeAnswer(resp)
	require.NoError(t, err)
	return a
}

func TestTokenGuardsEveryRouteButHealthz(t *testing.T) {
	fc := &fakeCluster{st: leaderStatus()}
	n := newTestNode(t, Config{Token: testToken, Cluster: fc})
	routes := []struct{ method, path, body string }{
		{"POST", "/v1/acquire", `{"key":"k","ttl":"30s"}`},
		{"POST", "/v1/release", `{"key":"k","owner":"0123456789abcdef0123456789abcdef"}`},
		{"POST", "/v1/extend", `{"key":"k","owner":"0123456789abcdef0123456789abcdef","ttl":"1s"}`},
		{"GET", "/v1/inspect?key=k", ""},
		{"GET", "/v1/locks", ""},
		{"GET", "/v1/cluster", ""},
		{"POST", "/v1/leave", ""},
		{"GET", "/metrics", ""},
		{"GET", "/no/such/route", ""}, // 401 before 404: no token, no map of the routes
	}
	refused := []struct {
		name   string
		header http.Header
		msg    string
	}{
		{"no token", nil, "requires a token"},
		{"wrong bearer", http.Header{"Authorization": {"Bearer not-the-token"}}, "wrong token"},
		{"prefix of the token", http.Header{"Authorization": {"Bearer " + testToken[:len(testToken)-1]}}, "wrong token"},
		{"token plus more", http.Header{"Authorization": {"Bearer " + testToken + "x"}}, "wrong token"},
		{"basic, not bearer", http.Header{"Authorization": {"Basic " + testToken}}, "requires a token"},
		{"wrong header token", http.Header{api.TokenHeader: {"nope"}}, "wrong token"},
	}
	for _, rt := range routes {
		for _, c := range refused {
			t.Run(rt.path+"/"+c.name, func(t *testing.T) {
				a := n.sendWith(t, rt.method, rt.path, rt.body, c.header)
				assert.Equal(t, http.StatusUnauthorized, a.status, a.raw)
				assert.Equal(t, api.CodeUnauthorized, a.errorCode())
				assert.Contains(t, a.errorField("message"), c.msg)
				assert.Equal(t, `Bearer realm="raftlock"`, a.header.Get("WWW-Authenticate"))
				assert.NotContains(t, a.raw, testToken, "the answer never echoes the token")
			})
		}
	}

	accepted := map[string]http.Header{
		"bearer":           {"Authorization": {"Bearer " + testToken}},
		"bearer lowercase": {"Authorization": {"bearer  " + testToken}},
		"token header":     {api.TokenHeader: {testToken}},
		"one good of two":  {"Authorization": {"Bearer nope"}, api.TokenHeader: {testToken}},
	}
	for name, header := range accepted {
		t.Run("accepted/"+name, func(t *testing.T) {
			a := n.sendWith(t, "POST", "/v1/acquire", `{"key":"`+name+`","ttl":"30s"}`, header)
			require.Equal(t, http.StatusOK, a.status, a.raw)
			assert.Positive(t, a.body["token"])
			info := n.sendWith(t, "GET", "/v1/inspect?key="+strings.ReplaceAll(name, " ", "+"), "", header)
			require.Equal(t, http.StatusOK, info.status, info.raw)
			assert.Equal(t, true, info.body["locked"])
		})
	}

	t.Run("healthz open, details with the token", func(t *testing.T) {
		open := n.do(t, "GET", "/healthz", "")
		require.Equal(t, http.StatusOK, open.status, open.raw)
		plain := newTestNode(t, Config{Cluster: fc}).do(t, "GET", "/healthz", "")
		assert.Equal(t, plain.body, open.body, "the node's token admits to the details")
	})

	t.Run("refusals are counted", func(t *testing.T) {
		refusals := func() float64 {
			m, err := sample(scrape(t, n), "raftlock_api_unauthorized_total", nil)
			require.NoError(t, err)
			return m.GetCounter().GetValue()
		}
		before := refusals()
		n.sendWith(t, "GET", "/v1/locks", "", nil)
		assert.Equal(t, before+1, refusals())
	})
}

func TestClientToken(t *testing.T) {
	n := newTestNode(t, Config{Token: testToken})
	ctx := context.Background()
	req := lock.AcquireRequest{Key: "k", Owner: lock.NewOwner(), TTL: time.Minute}

	with, err := api.NewClient(n.url, api.ClientConfig{Token: testToken})
	require.NoError(t, err)
	lease, err := with.Acquire(ctx, req)
	require.NoError(t, err)
	assert.Positive(t, lease.Token)
	info, err := with.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.True(t, info.Locked)
	locks, err := with.List(ctx, lock.ListRequest{})
	require.NoError(t, err)
	assert.Len(t, locks, 1)

	for name, token := range map[string]string{"without a token": "", "with the wrong token": "other"} {
		t.Run(name, func(t *testing.T) {
			c, err := api.NewClient(n.url, api.ClientConfig{Token: token})
			require.NoError(t, err)
			_, err = c.Acquire(ctx, lock.AcquireRequest{Key: "other", Owner: lock.NewOwner(), TTL: time.Minute})
			assert.ErrorIs(t, err, api.ErrUnauthorized)
			assert.NotErrorIs(t, err, lock.ErrUnknownOutcome, "a refused request was not done")
			assert.NotErrorIs(t, err, lock.ErrUnavailable)
			var se *api.ServerError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, http.StatusUnauthorized, se.StatusCode)
			_, err = c.Release(ctx, "k", req.Owner)
			assert.ErrorIs(t, err, api.ErrUnauthorized, "a refused release is an error, not (false, nil)")
			_, err = c.Inspect(ctx, "k")
			assert.ErrorIs(t, err, api.ErrUnauthorized)
			_, err = c.List(ctx, lock.ListRequest{})
			assert.ErrorIs(t, err, api.ErrUnauthorized)
			_, err = c.Cluster(ctx)
			assert.ErrorIs(t, err, api.ErrUnauthorized)
			h, err := c.Health(ctx)
			require.NoError(t, err, "/healthz needs no token")
			assert.True(t, h.Ready)
		})
	}
	still, err := with.Inspect(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, lease.Token, still.Token, "refused releases changed nothing")
}

func TestValidateToken(t *testing.T) {
	for _, good := range []string{"", "a", testToken, "0123456789abcdef"} {
		assert.NoError(t, api.ValidateToken(good), good)
	}
	for _, bad := range []string{"with space", "tab\there", "new\nline", "é", "\x7f"} {
		assert.Error(t, api.ValidateToken(bad), "%q", bad)
		_, err := api.NewClient("127.0.0.1:1", api.ClientConfig{Token: bad})
		assert.ErrorContains(t, err, "ClientConfig.Token", "%q", bad)
	}
}

// /healthz and /readyz answer without a token, but then say only how the
// node is (ok, or what is wrong): which node it is, its role, its leader,
// its failure tolerance and the reason are for a token the node knows, as
// /v1/cluster is. On a node that needs no token everyone gets them.
func TestProbesTellDetailsOnlyToAToken(t *testing.T) {
	fc := &fakeCluster{st: leaderStatus()}
	tokens, err := NewTokens([]Token{{Name: "nothing", Secret: secretNothing, Rules: []api.TokenRule{}}})
	require.NoError(t, err)
	n := newTestNode(t, Config{Token: testToken, Tokens: tokens, Cluster: fc})
	details := []string{"node_id", "role", "leader_id", "leader_addr", "failure_tolerance", "reason"}
	anyDetail := func(a answer) []string {
		var found []string
		for _, f := range details {
			if _, ok := a.body[f]; ok {
				found = append(found, f)
			}
		}
		for _, id := range []string{"n1", "n2", "127.0.0.1:7002"} {
			if strings.Contains(a.raw, id) {
				found = append(found, id)
			}
		}
		return found
	}
	unhealthy := leaderStatus()
	unhealthy.LogFault = "write /data/raft/wal: no space left on device"
	unready := leaderStatus()
	unready.Readiness = &api.Readiness{Ready: false, Reason: "failure tolerance 0 (n3 is unhealthy)"}
	for _, tc := range []struct {
		name   string
		st     api.ClusterStatus
		path   string
		status int
		code   string
	}{
		{"healthy", leaderStatus(), "/healthz", http.StatusOK, "ok"},
		{"log fault", unhealthy, "/healthz", http.StatusServiceUnavailable, api.CodeLogFault},
		{"ready", leaderStatus(), "/readyz", http.StatusOK, "ready"},
		{"not ready", unready, "/readyz", http.StatusServiceUnavailable, api.CodeNotReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc.set(tc.st)
			for who, header := range map[string]http.Header{
				"no token":    nil,
				"wrong token": {"Authorization": {"Bearer not-the-token"}},
			} {
				a := n.sendWith(t, "GET", tc.path, "", header)
				assert.Equal(t, tc.status, a.status, who)
				assert.Equal(t, tc.code, a.body["status"], who)
				assert.Empty(t, anyDetail(a), "%s: %s", who, a.raw)
				assert.NotContains(t, a.raw, "no space left", who)
			}
			for who, secret := range map[string]string{"the shared token": testToken, "a token without rights": secretNothing} {
				a := n.as(t, secret, "GET", tc.path, "")
				assert.Equal(t, tc.status, a.status, who)
				assert.Equal(t, tc.code, a.body["status"], who)
				assert.Equal(t, "n1", a.body["node_id"], who)
				assert.Equal(t, "n2", a.body["leader_id"], who)
				if tc.status != http.StatusOK {
					assert.Contains(t, a.errorField("message"), "node n1", who)
				}
			}
			plain := newTestNode(t, Config{Cluster: fc}).do(t, "GET", tc.path, "")
			assert.Equal(t, "n1", plain.body["node_id"], "a node without tokens tells everyone")
		})
	}
	fc.set(leaderStatus())
	c, err := api.NewClient(n.url, api.ClientConfig{Token: testToken})
	require.NoError(t, err)
	h, err := c.Health(context.Background())
	require.NoError(t, err)
	assert.Equal(t, api.Health{Ready: true, NodeID: "n1", Role: api.RoleFollower, LeaderID: "n2", LeaderAddr: "127.0.0.1:7002"}, h,
		"the Go client, with its token, gets the details")
}

// A refused token is logged, not only counted: a WARN with the remote
// address (never what was presented), at most once a minute over every
// route, with the count of refusals since.
func TestRefusedTokensAreLoggedRateLimited(t *testing.T) {
	logs := &lockedBuffer{}
	n := newTestNode(t, Config{Token: testToken, Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})})
	const guess = "guessed-secret-0123456789"
	for _, rt := range []struct{ method, path, body string }{
		{"GET", "/v1/locks", ""},
		{"POST", "/v1/acquire", `{"key":"k","ttl":"30s"}`},
		{"POST", "/v1/leave", ""},
		{"GET", "/v1/stream", ""},
	} {
		a := n.sendWith(t, rt.method, rt.path, rt.body, http.Header{"Authorization": {"Bearer " + guess}})
		require.Equal(t, http.StatusUnauthorized, a.status, rt.path)
	}
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "missing or wrong token") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 1, "one line for the burst, over every route: %s", logs.String())
	assert.Contains(t, lines[0], "[WARN]")
	assert.Contains(t, lines[0], "remote=127.0.0.1:")
	assert.Contains(t, lines[0], "path=/v1/locks")
	assert.Contains(t, lines[0], "wrong token")
	assert.NotContains(t, logs.String(), guess, "the token presented is never logged")
	m, err := sample(scrape(t, n), "raftlock_api_unauthorized_total", nil)
	require.NoError(t, err)
	assert.Equal(t, float64(4), m.GetCounter().GetValue(), "every refusal is counted")
}
