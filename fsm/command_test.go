package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestValidate(t *testing.T) {
	longKey := strings.Repeat("k", MaxKeyLen)
	tests := []struct {
		name string
		cmd  Command
		want error
	}{
		{"acquire", acquire(0, "k", ownerA, MinTTL, 0), nil},
		{"acquire at the limits", acquire(MaxStamp, longKey, ownerA, MaxTTL, MaxWait), nil},
		{"release", release(1, "k", ownerA), nil},
		{"extend", extend(1, "k", ownerA, time.Second), nil},
		{"cancel-wait", cancelWait(1, "k", ownerA), nil},
		{"tick", tick(1), nil},
		{"negative stamp", acquire(-1, "k", ownerA, time.Second, 0), ErrStampRange},
		{"stamp past MaxStamp", tick(MaxStamp + 1), ErrStampRange},
		{"unknown op", Command{Op: 0, Key: "k", Owner: ownerA}, ErrUnknownOp},
		{"unknown high op", Command{Op: 14}, ErrUnknownOp},
		{"new-term with key", Command{Op: OpNewTerm, Key: "k"}, ErrUnusedField},
		{"drop-unclaimed with owner", Command{Op: OpDropUnclaimed, Owner: ownerA}, ErrUnusedField},
		{"empty key", acquire(0, "", ownerA, time.Second, 0), ErrEmptyKey},
		{"key too long", release(0, longKey+"k", ownerA), ErrKeyTooLong},
		{"zero owner", extend(0, "k", Owner{}, time.Second), ErrZeroOwner},
		{"ttl below MinTTL", acquire(0, "k", ownerA, MinTTL-1, 0), ErrTTLRange},
		{"ttl above MaxTTL", extend(0, "k", ownerA, MaxTTL+1), ErrTTLRange},
		{"negative wait", acquire(0, "k", ownerA, time.Second, -1), ErrWaitRange},
		{"wait above MaxWait", acquire(0, "k", ownerA, time.Second, MaxWait+1), ErrWaitRange},
		{"release with ttl", Command{Op: OpRelease, Key: "k", Owner: ownerA, TTL: time.Second}, ErrUnusedField},
		{"cancel-wait with wait", Command{Op: OpCancelWait, Key: "k", Owner: ownerA, Wait: time.Second}, ErrUnusedField},
		{"extend with wait", Command{Op: OpExtend, Key: "k", Owner: ownerA, TTL: time.Second, Wait: 1}, ErrUnusedField},
		{"tick with key", Command{Op: OpTick, Key: "k"}, ErrUnusedField},
		{"tick with owner", Command{Op: OpTick, Owner: ownerA}, ErrUnusedField},
		{"tick with ttl", Command{Op: OpTick, TTL: 1}, ErrUnusedField},
		{"force-release", forceRelease(1, "k"), nil},
		{"force-release at the limits", forceRelease(MaxStamp, longKey), nil},
		{"force-release with owner", Command{Op: OpForceRelease, Key: "k", Owner: ownerA}, ErrUnusedField},
		{"force-release with ttl", Command{Op: OpForceRelease, Key: "k", TTL: time.Second}, ErrUnusedField},
		{"force-release with wait", Command{Op: OpForceRelease, Key: "k", Wait: time.Second}, ErrUnusedField},
		{"force-release without key", forceRelease(1, ""), ErrEmptyKey},
		{"force-release key too long", forceRelease(1, longKey+"k"), ErrKeyTooLong},
		{"op after force-release", Command{Op: OpForceRelease + 1, Key: "k"}, ErrUnknownOp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.cmd.Validate())
		})
	}
}
