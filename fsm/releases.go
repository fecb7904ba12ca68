package fsm

import "time"

// Remembered releases.
//
// A release (or a session's destroy) whose answer was lost is sent again
// with the same owner; by then the owner holds nothing, and without a
// memory the machine could only answer not held, which does not tell the
// caller whether its release ended the lease or the lease had already
// ended (run out, force-released, or handed on after a cancel). So the
// machine remembers each release by an owner that ended its hold, as key,
// owner and log time, and answers a repeat StatusReleased.
//
// The answer is true by construction: only an OpRelease that ended the
// owner's own hold (a lease, a semaphore or read/write slot, a multi-key
// grant, remembered under the key the release named) is remembered, never
// an expiry, a force-release or a cancel-wait; and an acquire by the owner
// of the key (OpAcquire, or OpAcquireAll naming it), whatever its answer,
// forgets it, since an owner may hold the same key again (a fenced client
// keeps its owner): after acquire, release, acquire, expiry, the release
// answers not held. OpSessionDestroy is remembered under its session ID
// (key ""), and OpSessionCreate of that ID forgets it.
//
// The memory is bounded by log time and by count: a release is forgotten
// ReleaseMemory after it was applied (far longer than a request is retried),
// and beyond MaxRememberedReleases the oldest goes first (at a few
// thousand releases a second, the count, not the time, bounds it: a
// repeat still has several seconds, longer than the retries of one
// request across a leader change). A repeat after that answers not held,
// as a release by an owner that never held the key does.
//
// Why this design: a field per held lock would cost every lock held (the
// state per held lock is kept small), while this costs only what recent
// releases need, about 130 bytes each with a 16-byte key (the record and
// its index slot; the key's bytes are the ended lease's, kept), so at
// most about 9 MB, and about 36 bytes each in a snapshot. Kept outside the
// snapshot, it would make a replica restored from a snapshot answer a
// repeat otherwise than the replica that applied the release, and Results
// would no longer be a function of the log. A release carrying the
// lease's token would be a new command field (and command level) and still
// not tell an expiry from a release. So it is state like the rest: in the
// snapshot (version 6; a Freezer copies it when it starts, as it does the
// sessions), in apply order, pruned as the log time moves, and the same on
// every replica. A snapshot of an earlier version has no records: one
// written by a build from before them, or version 5 written by this build
// while some member of its cluster cannot restore version 6 (during a
// rolling upgrade; SnapshotVersionFor). A machine restored from one
// remembers no release applied before it: it answers their repeats not
// held, the answer after the memory runs out, where a replica that applied
// them answers released (the caller gets the leader's answer). So the
// fallback is reached early only across or during an upgrade, and no
// other state differs.
const (
	ReleaseMemory         = 5 * time.Minute
	MaxRememberedReleases = 1 << 16
)

// releaseID names what a release ended: an owner's hold on key, or, with
// key "", the session whose ID is owner (keys are never empty).
type releaseID struct {
	key   string
	owner Owner
}

type releaseRecord struct {
	id         releaseID
	at         time.Duration // the log time it was applied
	prev, next *releaseRecord
}

// releases is the memory of recent releases: a list in apply order (so
// log time order) for pruning from the oldest, and an index by ID.
type releases struct {
	byID       map[releaseID]*releaseRecord // nil until the first record
	head, tail *releaseRecord               // oldest, newest
}

// remember records that id was released at log time at, which is not
// before any record's.
func (r *releases) remember(id releaseID, at time.Duration) {
	if r.byID == nil {
		r.byID = make(map[releaseID]*releaseRecord)
	}
	if old := r.byID[id]; old != nil {
		r.unlink(old) // released again since (the owner acquired it again): the newer counts
	}
	if len(r.byID) >= MaxRememberedReleases {
		r.unlink(r.head)
	}
	rec := &releaseRecord{id: id, at: at, prev: r.tail}
	if r.tail != nil {
		r.tail.next = rec
	} else {
		r.head = rec
	}
	r.tail = rec
	r.byID[id] = rec
}

// recalls reports whether id's release is remembered.
func (r *releases) recalls(id releaseID) bool {
	return r.byID[id] != nil
}

// forget drops id's record, if any: the owner acquires the key (or creates
// the session) again.
func (r *releases) forget(id releaseID) {
	if len(r.byID) == 0 {
		return
	}
	if rec := r.byID[id]; rec != nil {
		r.unlink(rec)
	}
}

// prune drops the records that are ReleaseMemory old at log time now.
func (r *releases) prune(now time.Duration) {
	for r.head != nil && r.head.at+ReleaseMemory <= now {
		r.unlink(r.head)
		if r.head == nil {
			r.byID = nil // a map keeps its peak size: let a burst's go
		}
	}
}

func (r *releases) unlink(rec *releaseRecord) {
	if rec.prev != nil {
		rec.prev.next = rec.next
	} else {
		r.head = rec.next
	}
	if rec.next != nil {
		rec.next.prev = rec.prev
	} else {
		r.tail = rec.prev
	}
	rec.prev, rec.next = nil, nil
	delete(r.byID, rec.id)
}

// len is the number of records.
func (r *releases) len() int { return len(r.byID) }
