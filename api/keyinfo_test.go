package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/raftlock/raftlock/lock"
)

// An inspect answer shows each hold of a semaphore with its token, time
// left, metadata and mode, a set's keys and a reservation, under the
// documented JSON names, and the client reads back what the node sent.
func TestKeyInfoHoldsAndSetKeysJSON(t *testing.T) {
	info := lock.KeyInfo{Locked: true, Token: 8, Remaining: 2 * time.Second, Kind: lock.KindRWLock, Holders: 2, Shared: true,
		Holds: []lock.HoldInfo{
			{Token: 7, Remaining: time.Second, Metadata: "pid=1", Shared: true},
			{Token: 8, Remaining: 2 * time.Second, Shared: true},
		}}
	b, err := json.Marshal(MakeKeyInfo("doc", info))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"holds":[{"token":7,"remaining_ms":1000,"metadata":"pid=1","shared":true},{"token":8,"remaining_ms":2000,"shared":true}]`)
	var back KeyInfo
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, info, back.Info())

	set := lock.KeyInfo{Locked: true, Token: 5, Remaining: time.Second, Holders: 1, SetKeys: []string{"a", "b"}}
	b, err = json.Marshal(MakeKeyInfo("a", set))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"set_keys":["a","b"]`)
	assert.NotContains(t, string(b), `"holds"`, "a mutex lists no holds")
	back = KeyInfo{}
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, set, back.Info())

	binary := lock.KeyInfo{Locked: true, Token: 5, Remaining: time.Second, Holders: 1, SetKeys: []string{"a", "\xff"}}
	b, err = json.Marshal(MakeKeyInfo("a", binary))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"set_keys_b64":["YQ==","/w=="]`)
	back = KeyInfo{}
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, binary, back.Info())

	reserved := lock.KeyInfo{Waiters: 1, Reserved: true}
	b, err = json.Marshal(MakeKeyInfo("a", reserved))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"reserved":true`)
	back = KeyInfo{}
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, reserved, back.Info())
}
