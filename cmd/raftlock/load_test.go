package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/lock"
)

// envOf is a lookupEnv over vars alone, so that a test sees none of the
// machine's RAFTLOCK_* variables.
func envOf(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// The agent's load step turns flags and the environment into its config
// without starting anything: no port taken, no data dir made.
func TestLoadAgentConfig(t *testing.T) {
	dir := t.TempDir()
	member := []string{"-node-id", "a", "-data-dir", dir}
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c agentConfig)
	}{
		{"dev", []string{"-dev"}, nil, func(t *testing.T, c agentConfig) {
			assert.True(t, c.dev)
			assert.Equal(t, "dev", c.cluster.NodeID)
			assert.Equal(t, "127.0.0.1:0", c.cluster.BindAddr)
			assert.True(t, c.cluster.Bootstrap)
			assert.Empty(t, c.cluster.DataDir, "-dev's data dir is made at the start")
			assert.Equal(t, hclog.Info, c.level)
		}},
		{"dev with its own bind and log level", []string{"-dev", "-bind", "127.0.0.1:9001", "-log-level", "debug"}, nil, func(t *testing.T, c agentConfig) {
			assert.Equal(t, "127.0.0.1:9001", c.cluster.BindAddr)
			assert.Equal(t, hclog.Debug, c.level)
		}},
		{"bootstrap with peers", append(member, "-bootstrap", "-peers", "a=127.0.0.1:7071, b=127.0.0.1:7081"), nil, func(t *testing.T, c agentConfig) {
			assert.Equal(t, "a", c.cluster.NodeID)
			assert.Equal(t, dir, c.cluster.DataDir)
			assert.True(t, c.cluster.Bootstrap)
			assert.Equal(t, []cluster.Peer{{ID: "a", Addr: "127.0.0.1:7071"}, {ID: "b", Addr: "127.0.0.1:7081"}}, c.cluster.Peers)
			assert.Empty(t, c.cluster.GossipBindAddr, "no gossip without its flags")
		}},
		{"join", append(member, "-join", "127.0.0.1:7071,127.0.0.1:7081"), nil, func(t *testing.T, c agentConfig) {
			assert.Equal(t, []string{"127.0.0.1:7071", "127.0.0.1:7081"}, c.cluster.Join)
		}},
		{"gossip on -bind's port + 1", append(member, "-bind", "127.0.0.1:7000", "-bootstrap-expect", "3", "-retry-join", "h1,h2", "-retry-join", "h3"), nil, func(t *testing.T, c agentConfig) {
			assert.Equal(t, "127.0.0.1:7001", c.cluster.GossipBindAddr)
			assert.Equal(t, 3, c.cluster.BootstrapExpect)
			assert.Equal(t, []string{"h1", "h2", "h3"}, c.cluster.RetryJoin)
		}},
		{"raft timing and quotas", append(member, "-bootstrap", "-raft-heartbeat", "2s", "-raft-election", "3", "-max-locks", "unlimited", "-max-sessions", "10"), nil, func(t *testing.T, c agentConfig) {
			assert.Equal(t, 2*time.Second, c.cluster.HeartbeatTimeout)
			assert.Equal(t, 3*time.Second, c.cluster.ElectionTimeout, "plain seconds")
			assert.Equal(t, cluster.Unlimited, c.cluster.MaxLocks)
			assert.Equal(t, 10, c.cluster.MaxSessions)
		}},
		{"API flags", []string{"-dev", "-advertise-http", "lb.example:443", "-allowed-origins", "https://ops.example.com", "-allowed-hosts", "locks.example.com", "-http-token", "0123456789abcdef"}, nil, func(t *testing.T, c agentConfig) {
			assert.Equal(t, "http://lb.example:443", c.cluster.APIAddr)
			assert.Equal(t, []string{"https://ops.example.com"}, c.origins)
			assert.Equal(t, []string{"locks.example.com"}, c.hosts)
			assert.Equal(t, "0123456789abcdef", c.sec.token)
			assert.Equal(t, redacted, c.flagValues["http-token"], "the secret is not shown")
			assert.Equal(t, "lb.example:443", c.flagValues["advertise-http"])
		}},
		{"environment", member[:2], map[string]string{"RAFTLOCK_NODE_ID": "from-env", "RAFTLOCK_DATA_DIR": dir, "RAFTLOCK_BOOTSTRAP": "true", "RAFTLOCK_VOTERS": "5"}, func(t *testing.T, c agentConfig) {
			assert.Equal(t, "a", c.cluster.NodeID, "the command line wins")
			assert.Equal(t, dir, c.cluster.DataDir)
			assert.True(t, c.cluster.Bootstrap)
			assert.Equal(t, 5, c.cluster.Voters)
		}},
		{"the leader writes in parallel unless told not to", append(member, "-bootstrap"), nil, func(t *testing.T, c agentConfig) {
			assert.True(t, c.cluster.LeaderWritesInParallel)
		}},
		{"the leader syncs before it sends", append(member, "-bootstrap", "-leader-writes-in-parallel=false"), nil, func(t *testing.T, c agentConfig) {
			assert.False(t, c.cluster.LeaderWritesInParallel)
		}},
		{"the leader syncs before it sends, from the environment", append(member, "-bootstrap"), map[string]string{"RAFTLOCK_LEADER_WRITES_IN_PARALLEL": "false"}, func(t *testing.T, c agentConfig) {
			assert.False(t, c.cluster.LeaderWritesInParallel)
		}},
		{"a variable set empty is set", []string{"-dev"}, map[string]string{"RAFTLOCK_BIND": ""}, func(t *testing.T, c agentConfig) {
			assert.Equal(t, "", c.cluster.BindAddr)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadAgentConfig(tc.args, envOf(tc.env))
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

// Every bad flag set fails the load with an error naming the flag (or the
// variable) the user typed.
func TestLoadAgentConfigErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	member := []string{"-node-id", "a", "-data-dir", dir}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-dev", "extra"}, nil, `unexpected argument "extra"`},
		{[]string{"-nope"}, nil, "-nope"},
		{[]string{"-log-level", "loud"}, nil, "-log-level"},
		{[]string{"-dev", "-data-dir", dir}, nil, "drop -data-dir"},
		{[]string{"-bootstrap"}, map[string]string{"RAFTLOCK_NODE_ID": "a"}, "-data-dir is required"},
		{append(member, "-peers", "a=127.0.0.1:1"), nil, "-peers only makes sense with -bootstrap"},
		{append(member, "-bootstrap", "-peers", "a"), nil, "-peers"},
		{append(member, "-join", "nowhere"), nil, "-join"},
		{append(member, "-bootstrap", "-voters", "2"), nil, "-voters must be odd"},
		{append(member, "-bootstrap", "-raft-heartbeat", "0"), nil, "-raft-heartbeat must be positive"},
		{append(member, "-bootstrap-expect", "3", "-gossip-bind", "off"), nil, "-bootstrap-expect needs gossip"},
		{append(member, "-bootstrap", "-bind", "127.0.0.1:x"), map[string]string{"RAFTLOCK_RETRY_JOIN": "h1"}, "-bind"},
		{append(member, "-retry-join", "h1", "-gossip-key-file", filepath.Join(dir, "none")), nil, "-gossip-key-file"},
		{[]string{"-dev", "-leader-wait", "-1s"}, nil, "-leader-wait"},
		{[]string{"-dev", "-wal-segment-size", "1"}, nil, "-wal-segment-size"},
		{[]string{"-dev", "-peer-cert-file", "x"}, nil, "-peer-cert-file"},
		{[]string{"-dev", "-client-ca-file", "x"}, nil, "-client-ca-file"},
		{[]string{"-dev", "-http-token", "short"}, nil, "-http-token:"},
		{[]string{"-dev", "-http-token-file", filepath.Join(dir, "none")}, nil, "-http-token-file"},
		{[]string{"-dev", "-http", "127.0.0.1:7071", "-bind", "127.0.0.1:7071"}, nil, "-http 127.0.0.1:7071 and -bind 127.0.0.1:7071"},
		{[]string{"-dev", "-advertise-http", "ftp://x:1"}, nil, "-advertise-http"},
		{[]string{"-dev", "-max-http-conns", "-1"}, nil, "-max-http-conns"},
		{[]string{"-dev", "-http-acl-file", filepath.Join(dir, "none")}, nil, "-http-acl-file"},
		{[]string{"-dev", "-allowed-origins", "ops.example.com"}, nil, "-allowed-origins"},
		{[]string{"-dev", "-allowed-hosts", "*.example.com"}, nil, "-allowed-hosts"},
		{[]string{"-dev"}, map[string]string{"RAFTLOCK_VOTERS": "three"}, "RAFTLOCK_VOTERS"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := loadAgentConfig(tc.args, envOf(tc.env))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotRegexp(t, `Timeout|Bootstrap|Voters|DataDir`, err.Error(), "no Go names")
			var help *helpRequest
			assert.False(t, errors.As(err, &help))
		})
	}
}

func TestLoadAgentConfigHelp(t *testing.T) {
	_, err := loadAgentConfig([]string{"-h"}, envOf(nil))
	var help *helpRequest
	require.True(t, errors.As(err, &help), "%v", err)
	assert.True(t, strings.HasPrefix(help.text, "Usage: raftlock agent "+agentSynopsis), help.text)
	assert.Contains(t, help.text, "RAFTLOCK_NODE_ID")
}

// The lock command's load step splits KEY and COMMAND, reads the flags
// wherever they stand, and checks them as the store would, without
// reaching an agent.
func TestLoadLockConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c lockConfig)
	}{
		{"plain", []string{"k", "true"}, nil, func(t *testing.T, c lockConfig) {
			assert.Equal(t, "k", c.key)
			assert.Nil(t, c.keys)
			assert.Equal(t, []string{"true"}, c.argv)
			assert.Equal(t, lock.KindMutex, c.kind)
			assert.Equal(t, lock.DefaultTTL, c.ttl)
			assert.Zero(t, c.wait)
			assert.Equal(t, 10*time.Second, c.killAfter)
			assert.Contains(t, c.metadata, "raftlock lock host=")
		}},
		{"flags after KEY", []string{"k", "-ttl", "5s", "-wait", "2", "--", "sh", "-c", "exit 3"}, nil, func(t *testing.T, c lockConfig) {
			assert.Equal(t, 5*time.Second, c.ttl)
			assert.Equal(t, 2*time.Second, c.wait)
			assert.Equal(t, []string{"sh", "-c", "exit 3"}, c.argv)
		}},
		{"semaphore", []string{"-n", "3", "k", "true"}, nil, func(t *testing.T, c lockConfig) {
			assert.Equal(t, lock.KindSemaphore, c.kind)
			assert.Equal(t, 3, c.limit)
		}},
		{"reader", []string{"-shared", "k", "true"}, nil, func(t *testing.T, c lockConfig) {
			assert.Equal(t, lock.KindRWLock, c.kind)
			assert.True(t, c.shared)
		}},
		{"keys", []string{"-keys", "b,a", "--", "true", "-keys"}, nil, func(t *testing.T, c lockConfig) {
			assert.Equal(t, []string{"a", "b"}, c.keys)
			assert.Equal(t, "a", c.key, "the first key stands for the set")
			assert.Equal(t, []string{"true", "-keys"}, c.argv)
		}},
		{"session", []string{"-session-ttl", "15s", "-metadata", "job 7", "k", "true"}, nil, func(t *testing.T, c lockConfig) {
			assert.Equal(t, 15*time.Second, c.sessionTTL)
			assert.Equal(t, "job 7", c.metadata)
		}},
		{"environment", []string{"-ttl", "3s", "k", "true"}, map[string]string{"RAFTLOCK_TTL": "7s", "RAFTLOCK_KILL_AFTER": "1s"}, func(t *testing.T, c lockConfig) {
			assert.Equal(t, 3*time.Second, c.ttl, "the command line wins")
			assert.Equal(t, time.Second, c.killAfter)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadLockConfig(tc.args, envOf(tc.env))
			require.NoError(t, err)
			t.Cleanup(func() { c.client.Close() })
			tc.check(t, c)
		})
	}
}

func TestLoadLockConfigErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"k"}, nil, "want KEY -- COMMAND"},
		{[]string{"k", "--"}, nil, "no COMMAND given after KEY"},
		{[]string{"--", "-k", "true"}, nil, "KEY is missing"},
		{[]string{"-kill-after", "0", "k", "true"}, nil, "-kill-after"},
		{[]string{"-wait", "-1s", "k", "true"}, nil, "invalid wait"},
		{[]string{"-n", "0", "k", "true"}, nil, "-n must be between"},
		{[]string{"-shared", "-write", "k", "true"}, nil, "-shared"},
		{[]string{"-keys", "a,a", "--", "true"}, nil, "-keys"},
		{[]string{"-keys", "a,b", "-session-ttl", "15s", "--", "true"}, nil, "-keys"},
		{[]string{"-session-ttl", "1000h", "k", "true"}, nil, "-session-ttl"},
		{[]string{"-token-file", filepath.Join(t.TempDir(), "none"), "k", "true"}, nil, "-token-file"},
		{[]string{"-client-cert", "c.pem", "k", "true"}, nil, "-client-key"},
		{[]string{"-addr", "", "k", "true"}, nil, "-addr"},
		{[]string{"k", "true"}, map[string]string{"RAFTLOCK_WAIT": "soon"}, "RAFTLOCK_WAIT"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := loadLockConfig(tc.args, envOf(tc.env))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
