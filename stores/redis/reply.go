package redis

import (
	"fmt"
	"time"

	"github.com/raftlock/raftlock/lock"
)

// reply reads a script's answer: an array of strings, integers and arrays.
type reply []any

func (r reply) str(i int) string {
	if i < len(r) {
		if s, ok := r[i].(string); ok {
			return s
		}
	}
	return ""
}

func (r reply) int(i int) int64 {
	if i < len(r) {
		if n, ok := r[i].(int64); ok {
			return n
		}
	}
	return 0
}

// dur is element i, a count of microseconds, as a duration.
func (r reply) dur(i int) time.Duration { return time.Duration(r.int(i)) * time.Microsecond }

func (r reply) list(i int) reply {
	if i < len(r) {
		if l, ok := r[i].([]any); ok {
			return reply(l)
		}
	}
	return nil
}

func asReply(v any) (reply, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redis store: unexpected answer %T from a script", v)
	}
	return reply(l), nil
}

// keyInfo reads a key's view (lua/state.lua's view).
func keyInfo(v reply) lock.KeyInfo {
	if v.int(0) == 0 {
		return lock.KeyInfo{Waiters: int(v.int(3)), Reserved: v.int(12) == 1}
	}
	info := lock.KeyInfo{
		Locked: true, Token: uint64(v.int(1)), Remaining: v.dur(2), Waiters: int(v.int(3)),
		Metadata: v.str(4), Delayed: v.int(5) == 1, Kind: lock.Kind(v.int(6)), Limit: int(v.int(7)),
		Holders: int(v.int(8)), Shared: v.int(9) == 1,
	}
	setKeys := v.list(11)
	for i := range setKeys {
		info.SetKeys = append(info.SetKeys, setKeys.str(i))
	}
	holds := v.list(10)
	for i := range holds {
		h := holds.list(i)
		info.Holds = append(info.Holds, lock.HoldInfo{Token: uint64(h.int(0)), Remaining: h.dur(1), Metadata: h.str(2), Shared: h.int(3) == 1, Delayed: h.int(4) == 1})
	}
	return info
}

// us is d in whole microseconds, as the scripts count time.
func us(d time.Duration) int64 { return int64(d / time.Microsecond) }
