package httpwire

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The hand-written request bodies are json.Marshal's, byte for byte, and
// are in force for the types as they are; anything they do not cover
// (another field, a string json.Marshal escapes) goes to json.Marshal.
func TestEncodeRequestIsJSONs(t *testing.T) {
	require.True(t, fastRequests, "the hand-written request encoding no longer matches json.Marshal: a field was added to a request; update appendRequest")
	s := func(v string) *string { return &v }
	limit, shared := 3, true
	for _, tc := range []struct {
		v    any
		fast bool
	}{
		{AcquireRequest{KeyFields: MakeKeyFields("jobs/a"), Owner: s("0123456789abcdef"), TTL: NewDuration(30 * time.Second)}, true},
		{AcquireRequest{KeyFields: MakeKeyFields("\xff"), Owner: s("o"), TTL: NewDuration(time.Minute), Wait: NewDuration(90 * time.Second), Metadata: s("host-1 pid 7")}, true},
		{AcquireRequest{KeyFields: MakeKeyFields("a<b>&\"c\\\u2028é"), Owner: s("o"), TTL: NewDuration(time.Second)}, false},
		{AcquireRequest{KeyFields: MakeKeyFields("k"), Owner: s(""), Metadata: s("tab\there")}, false},
		{AcquireRequest{KeyFields: MakeKeyFields("k"), TTLMS: NewMillisField(5), WaitMS: NewMillisField(0)}, false},
		{AcquireRequest{KeyFields: MakeKeyFields("k"), Kind: s("semaphore"), Limit: &limit}, false},
		{AcquireRequest{KeyFields: MakeKeyFields("k"), Shared: &shared, Session: s("abc")}, false},
		{AcquireRequest{Keys: []string{"a", "b"}, TTL: NewDuration(time.Second)}, false},
		{AcquireRequest{}, true},
		{ReleaseRequest{KeyFields: MakeKeyFields("jobs/a"), Owner: s("o")}, true},
		{ReleaseRequest{}, true},
		{ExtendRequest{KeyFields: MakeKeyFields("jobs/a"), Owner: s("o"), TTL: NewDuration(time.Hour)}, true},
		{ExtendRequest{KeyFields: MakeKeyFields("jobs/a"), TTLMS: NewMillisField(1000)}, false},
		{struct{ KeyFields }{MakeKeyFields("k")}, false}, // a type it does not write
	} {
		want, err := json.Marshal(tc.v)
		require.NoError(t, err)
		got, err := EncodeRequest(tc.v)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%#v", tc.v)
		_, fast := appendRequest(nil, tc.v)
		assert.Equal(t, tc.fast, fast, "fast path taken for %s", want)
	}
}
