package fsm

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validCommands covers every op and the limits of every field.
var validCommands = []Command{
	acquire(0, "k", ownerA, MinTTL, 0),
	acquire(1234567*ms, "orders/42", ownerB, 30*time.Second, 5*time.Second),
	acquire(MaxStamp, strings.Repeat("\xff", MaxKeyLen), Owner{0xff, 15: 0xff}, MaxTTL, MaxWait),
	release(99*ms, "orders/42", ownerA),
	extend(100*ms, "orders/42", ownerA, 10*time.Second),
	cancelWait(101*ms, "\x00", ownerC),
	tick(0),
	tick(MaxStamp),
	newTerm(7 * ms),
	dropUnclaimed(MaxStamp),
	createSession(5*ms, ownerA, MinTTL, 0),
	createSession(MaxStamp, Owner{0xff, 15: 0xff}, MaxTTL, MaxLockDelay),
	renewSession(6*ms, ownerB),
	destroySession(7*ms, ownerC),
	acquireIn(8*ms, "k", ownerA, ownerB, 0, ""),
	acquireIn(9*ms, "k", ownerA, ownerB, MaxWait, strings.Repeat("m", MaxMetaLen)),
	{Op: OpAcquire, Stamp: 10 * ms, Key: "k", Owner: ownerC, TTL: time.Second, Meta: "host=a"},
	forceRelease(102*ms, "orders/42"),
	acquireKind(11*ms, "pool", ownerA, time.Second, time.Second, 8, false),
	acquireKind(12*ms, "pool", ownerB, time.Second, 0, MaxHolders, false),
	acquireKind(13*ms, "doc", ownerC, time.Second, MaxWait, 0, true),
	acquireKind(14*ms, "doc", ownerD, time.Second, 0, 0, false),
	{Op: OpAcquire, Stamp: 15 * ms, Key: "doc", Owner: ownerA, Session: ownerB, Kind: KindRW, Shared: true, Meta: "r"},
	forceRelease(MaxStamp, strings.Repeat("\xff", MaxKeyLen)),
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range validCommands {
		b, err := c.AppendBinary([]byte("prefix"))
		require.NoError(t, err, "%+v", c)
		require.Equal(t, "prefix", string(b[:6]), "appends")
		got, err := DecodeCommand(b[6:])
		require.NoError(t, err, "%+v", c)
		assert.Equal(t, c, got)
	}
}

func TestCommandEncodingIsCompactAndStable(t *testing.T) {
	// The wire format is what replicas exchange and store in the raft log:
	// changing it needs a new version byte, so pin one encoding exactly.
	c := acquire(1500*ms, "ab", Owner{1, 15: 2}, 30*time.Second, 0)
	b, err := c.AppendBinary(nil)
	require.NoError(t, err)
	assert.Equal(t,
		"01"+"01"+"80dea0cb05"+"02"+"6162"+"01000000000000000000000000000002"+"80d88ee16f"+"00",
		hex.EncodeToString(b))

	fb, err := forceRelease(1, "ab").AppendBinary(nil)
	require.NoError(t, err)
	assert.Equal(t, "01"+"10"+"01"+"02"+"6162", hex.EncodeToString(fb), "force-release: op 16, stamp, key, no owner")

	tb, err := tick(0).AppendBinary(nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{encodingVersion, byte(OpTick), 0}, tb)
}

func TestAppendBinaryRejectsInvalid(t *testing.T) {
	b, err := acquire(0, "", ownerA, time.Second, 0).AppendBinary([]byte{7})
	assert.ErrorIs(t, err, ErrEmptyKey)
	assert.Equal(t, []byte{7}, b, "b is returned unchanged")

	b, err = AppendBatch([]byte{7}, []Command{tick(0), release(0, "k", Owner{})})
	assert.ErrorIs(t, err, ErrZeroOwner)
	assert.ErrorContains(t, err, "command 1")
	assert.Equal(t, []byte{7}, b)
}

func TestDecodeCommandErrors(t *testing.T) {
	enc := func(c Command) []byte {
		b, err := c.AppendBinary(nil)
		require.NoError(t, err)
		return b
	}
	good := enc(acquire(5, "k", ownerA, time.Second, 0))
	ownerAt := 1 + 1 + 1 + 1 + 1 // version op stamp keylen key
	withOwner := func(o Owner) []byte {
		b := bytes.Clone(good)
		copy(b[ownerAt:], o[:])
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrBadEncoding},
		{"bad version", append([]byte{2}, good[1:]...), ErrBadVersion},
		{"version zero", append([]byte{0}, good[1:]...), ErrBadVersion},
		{"only version", []byte{1}, ErrBadEncoding},
		{"unknown op", []byte{1, 13, 0}, ErrUnknownOp},
		{"op zero", []byte{1, 0, 0}, ErrUnknownOp},
		{"trailing bytes", append(bytes.Clone(good), 0), ErrBadEncoding},
		{"truncated", good[:len(good)-1], ErrBadEncoding},
		{"truncated owner", good[:ownerAt+3], ErrBadEncoding},
		{"non-shortest varint", []byte{1, byte(OpTick), 0x80, 0x00}, ErrBadEncoding},
		{"varint over 64 bits", []byte{1, byte(OpTick), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, ErrBadEncoding},
		{"varint too long", []byte{1, byte(OpTick), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x00}, ErrBadEncoding},
		{"stamp over MaxStamp", append([]byte{1, byte(OpTick)}, appendUvarint(nil, uint64(MaxStamp)+1)...), ErrStampRange},
		{"empty key", []byte{1, byte(OpRelease), 0, 0}, ErrEmptyKey},
		{"key too long", append([]byte{1, byte(OpRelease), 0}, appendUvarint(nil, MaxKeyLen+1)...), ErrKeyTooLong},
		{"key longer than input", []byte{1, byte(OpRelease), 0, 100, 'k'}, ErrBadEncoding},
		{"huge key length", append([]byte{1, byte(OpRelease), 0}, appendUvarint(nil, 1<<62)...), ErrKeyTooLong},
		{"zero owner", withOwner(Owner{}), ErrZeroOwner},
		{"ttl over MaxTTL", enc2(t, 5, "k", ownerA, uint64(MaxTTL)+1, 0), ErrTTLRange},
		{"ttl under MinTTL", enc2(t, 5, "k", ownerA, uint64(MinTTL)-1, 0), ErrTTLRange},
		{"wait over MaxWait", enc2(t, 5, "k", ownerA, uint64(time.Second), uint64(MaxWait)+1), ErrWaitRange},
		{"tick carrying a key", append(enc(tick(0)), 1, 'k'), ErrBadEncoding},
		{"force-release carrying an owner", append(enc(forceRelease(0, "k")), ownerA[:]...), ErrBadEncoding},
		{"force-release without key", []byte{1, byte(OpForceRelease), 0}, ErrBadEncoding},
		{"force-release with empty key", []byte{1, byte(OpForceRelease), 0, 0}, ErrEmptyKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := DecodeCommand(tt.in)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.Equal(t, Command{}, c)
		})
	}
}

// enc2 hand-encodes an acquire with raw ttl and wait, to reach values that
// AppendBinary refuses to write.
func enc2(t *testing.T, stamp uint64, key string, o Owner, ttl, wait uint64) []byte {
	t.Helper()
	b := []byte{encodingVersion, byte(OpAcquire)}
	b = appendUvarint(b, stamp)
	b = appendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = append(b, o[:]...)
	b = appendUvarint(b, ttl)
	return appendUvarint(b, wait)
}

func TestBatchRoundTrip(t *testing.T) {
	for _, cmds := range [][]Command{nil, validCommands[:1], validCommands} {
		b, err := AppendBatch(nil, cmds)
		require.NoError(t, err)
		got, err := DecodeBatch(b)
		require.NoError(t, err)
		assert.Len(t, got, len(cmds))
		for i := range cmds {
			assert.Equal(t, cmds[i], got[i])
		}
	}
}

func TestDecodeBatchErrors(t *testing.T) {
	good, err := AppendBatch(nil, []Command{tick(1), release(2, "k", ownerA)})
	require.NoError(t, err)
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrBadEncoding},
		{"bad version", append([]byte{9}, good[1:]...), ErrBadVersion},
		{"no count", []byte{1}, ErrBadEncoding},
		{"count beyond the bytes", []byte{1, 3, byte(OpTick), 0, byte(OpTick), 0}, ErrBadEncoding},
		{"huge count", append([]byte{1}, appendUvarint(nil, 1<<40)...), ErrBadEncoding},
		{"count short of the bytes", append([]byte{1, 1}, good[2:]...), ErrBadEncoding},
		{"trailing bytes", append(bytes.Clone(good), 0), ErrBadEncoding},
		{"truncated command", good[:len(good)-1], ErrBadEncoding},
		{"bad command", []byte{1, 1, 13, 0}, ErrUnknownOp},
		{"version inside the batch", []byte{1, 1, 1, byte(OpTick), 0}, ErrBadEncoding},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmds, err := DecodeBatch(tt.in)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.Nil(t, cmds)
		})
	}
}

func TestDecodedKeysDoNotAliasInput(t *testing.T) {
	b, err := release(1, "abc", ownerA).AppendBinary(nil)
	require.NoError(t, err)
	c, err := DecodeCommand(b)
	require.NoError(t, err)
	for i := range b {
		b[i] = 0
	}
	assert.Equal(t, "abc", c.Key)
}
