package cluster

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/lock"
)

// The forwarding RPC's messages. Every message starts with wireVersion; a
// node that reads another version answers codeBadRequest, so a rolling
// upgrade that changes the format fails loudly instead of misreading.
//
//	request: version | kind | body
//	  kindCommand: the command's own fsm encoding (fsm.Command.AppendBinary)
//	  kindRead:    uvarint key length | key | 0, or 1 and a 16-byte owner
//	  kindJoin:    string id | string address    (string = uvarint length | bytes)
//	  kindJoinEmpty: as kindJoin
//	  kindRemove:  string id
//	  kindList:    string prefix | string after | uvarint limit (0: the leader's page size)
//	  kindInfo:    string id | string API address (the asking node's own, so one exchange informs both)
//	  kindWaitAcquire: an acquire with a wait, in the fsm encoding (as kindCommand)
//	  kindIdentity: string id | string cluster ID (the asking node's; empty if it knows none)
//	  kindServerStats: string id (the asking leader's) | health flags (1 known, 2 the asked node healthy) |
//	               uvarint failure tolerance | uvarint voters | uvarint healthy voters
//	reply: version | code | kind | body
//	  codeOK, kindCommand: status | uvarint token | varint expiresAt | varint now | uvarint waiters
//	  codeOK, kindRead:    flags (1 held, 2 held by the asking owner) | uvarint token | varint remaining | uvarint waiters
//	  codeOK, kindWaitAcquire: status | uvarint token | varint remaining | uvarint waiters | varint ttl;
//	                       remaining counts from when the request reached the leader
//	  codeOK, kindJoin/kindJoinEmpty/kindRemove: empty
//	  codeOK, kindInfo:    string id | string API address (may be empty)
//	  codeOK, kindIdentity: string id | string cluster ID (may be empty)
//	  codeOK, kindServerStats: varint last contact (ns; negative: never) | uvarint last log term | uvarint last log index
//	  codeOK, kindList:    flags (1 more keys follow) | uvarint count |
//	                       count × (string key | uvarint token | varint remaining | uvarint waiters)
//	  codeNotLeader: string leader address (may be empty)
//	  other codes: string message
//
// New request kinds are added without a new version: a node that does not
// know a kind answers codeBadRequest ("bad request kind"), which the asking
// node reports as ErrBadRequest, and the kinds it knows keep working. So a
// cluster upgraded one node at a time serves every older kind throughout;
// kindList (added after the first release) works once the leader has it.
// Kind 6 (an await of a follower's own waiter, retired when waiting moved
// to the leader) is never reused; kindWaitAcquire needs a leader that
// knows it; a member too old to answer kindIdentity is joined through
// without the cluster check.
const wireVersion = 1

type requestKind byte

const (
	kindCommand requestKind = 1 // a lock command for the leader to stamp and propose
	kindRead    requestKind = 2 // a linearizable read of one key, at the leader's log time
	kindJoin    requestKind = 3 // add a voter
	kindRemove  requestKind = 4 // remove a server (graceful leave)
	kindList    requestKind = 5 // a linearizable page of held keys, at the leader's log time
	// 6 was kindAwait; retired, never reuse.
	kindInfo        requestKind = 7 // any node (leader or not) tells who it is and where its API is
	kindWaitAcquire requestKind = 8 // an acquire that may wait, parked at the leader until its grant or the end of its wait
	// kindIdentity: any node (leader or not) tells its node and cluster IDs,
	// asked by a node about to join through it.
	kindIdentity requestKind = 9
	// kindJoinEmpty: add a node whose data dir held no raft state; a member
	// of that ID (its data dir emptied) is removed first, see addMember.
	kindJoinEmpty requestKind = 10
	// kindServerStats: the leader asks any member (leader or not) for its
	// log position and last contact, telling it the cluster's health
	// (reconcile.go).
	kindServerStats requestKind = 11
)

// maxListPage is the most keys one kindList reply carries. A listed key
// encodes in at most maxListEntryLen bytes, so a full page (about 2.2 MB) stays
// well under transport.MaxFrameSize; a longer listing takes several pages.
const (
	maxListPage     = 4096
	maxListEntryLen = binary.MaxVarintLen64 + fsm.MaxKeyLen + 3*binary.MaxVarintLen64
)

func (k requestKind) String() string {
	switch k {
	case kindCommand:
		return "command"
	case kindRead:
		return "read"
	case kindJoin:
		return "join"
	case kindJoinEmpty:
		return "join-empty"
	case kindRemove:
		return "remove"
	case kindList:
		return "list"
	case kindWaitAcquire:
		return "wait-acquire"
	case kindInfo:
		return "info"
	case kindIdentity:
		return "identity"
	case kindServerStats:
		return "server-stats"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

type request struct {
	kind requestKind
	cmd  fsm.Command // kindCommand, kindWaitAcquire

	key       string    // kindRead
	owner     fsm.Owner // kindRead when withOwner
	withOwner bool      // kindRead: also say whether owner is the holder

	id        string       // kindJoin, kindJoinEmpty, kindRemove, kindInfo, kindIdentity (the asking node)
	addr      string       // kindJoin, kindJoinEmpty
	apiAddr   string       // kindInfo: the asking node's
	clusterID string       // kindIdentity: the asking node's, empty if it knows none
	health    healthReport // kindServerStats: the asking leader's judgement

	prefix string // kindList: only keys with this prefix
	after  string // kindList: only keys sorting after this one
	limit  int    // kindList: at most this many keys; 0 for no limit (the leader still pages)
}

// healthReport is what the leader tells a member with each kindServerStats
// request: the cluster's failure tolerance, and whether it judges that
// member healthy. known is false before the leader's first health check.
type healthReport struct {
	known         bool
	healthy       bool
	tolerance     int
	voters        int
	healthyVoters int
}

type replyCode byte

const (
	codeOK             replyCode = 1
	codeNotLeader      replyCode = 2 // not dispatched; the body hints at the leader
	codeLostLeadership replyCode = 3 // proposed, then leadership was lost: outcome unknown
	codeShuttingDown   replyCode = 4 // the leader is closing; outcome unknown
	codeBadRequest     replyCode = 5 // malformed or not allowed; retrying will not help
	codeUnavailable    replyCode = 6 // the leader could not do it now (e.g. a config change failed)
)

// readResult is what a read tells: never the holder's owner, only whether
// the asking owner is the holder.
type readResult struct {
	held      bool
	mine      bool
	token     uint64
	remaining time.Duration // the holder's lease left at the leader's log time when it answered
	waiters   int
}

// waitAnswer is how a waiting acquire ended at the leader: granted (token
// and remaining are the owner's lease, remaining counted from when the
// request reached the leader), held (the wait ran out; token and remaining
// describe the holder, if any), or queue-full.
type waitAnswer struct {
	status    fsm.Status
	token     uint64
	remaining time.Duration
	waiters   int
	// ttl, for a grant, is the lease's term: the TTL asked, for a new grant
	// or a hand-off; what the lease had left at its stamp, for a repeat by
	// the holder (lock.Lease.TTL).
	ttl time.Duration
}

// listPage is one kindList answer: held keys in byte order, never their
// owners, and whether more keys match after the last one.
type listPage struct {
	locks []lock.LockInfo // each Locked, Remaining at the leader's log time when it answered
	more  bool
}

// nodeInfo is what a kindInfo or kindIdentity reply tells about the node
// that answers.
type nodeInfo struct {
	id        string
	apiAddr   string // kindInfo
	clusterID string // kindIdentity
}

type reply struct {
	code   replyCode
	kind   requestKind
	result fsm.Result  // codeOK, kindCommand
	wait   waitAnswer  // codeOK, kindWaitAcquire
	read   readResult  // codeOK, kindRead
	list   listPage    // codeOK, kindList
	info   nodeInfo    // codeOK, kindInfo, kindIdentity
	stats  serverStats // codeOK, kindServerStats
	leader string      // codeNotLeader
	msg    string      // other codes
}

func (r request) appendBinary(b []byte) ([]byte, error) {
	b = append(b, wireVersion, byte(r.kind))
	switch r.kind {
	case kindCommand, kindWaitAcquire:
		return r.cmd.AppendBinary(b)
	case kindRead:
		b = appendString(b, r.key)
		if r.withOwner {
			b = append(b, 1)
			b = append(b, r.owner[:]...)
		} else {
			b = append(b, 0)
		}
	case kindJoin, kindJoinEmpty:
		b = appendString(b, r.id)
		b = appendString(b, r.addr)
	case kindRemove:
		b = appendString(b, r.id)
	case kindList:
		b = appendString(b, r.prefix)
		b = appendString(b, r.after)
		b = binary.AppendUvarint(b, uint64(max(r.limit, 0)))
	case kindInfo:
		b = appendString(b, r.id)
		b = appendString(b, r.apiAddr)
	case kindIdentity:
		b = appendString(b, r.id)
		b = appendString(b, r.clusterID)
	case kindServerStats:
		b = appendString(b, r.id)
		var flags byte
		if r.health.known {
			flags |= 1
		}
		if r.health.healthy {
			flags |= 2
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(max(r.health.tolerance, 0)))
		b = binary.AppendUvarint(b, uint64(max(r.health.voters, 0)))
		b = binary.AppendUvarint(b, uint64(max(r.health.healthyVoters, 0)))
	default:
		return nil, fmt.Errorf("%w: cannot encode request %v", ErrBadRequest, r.kind)
	}
	return b, nil
}

// decodeRequest never panics: bad bytes give an error matching ErrBadRequest.
func decodeRequest(b []byte) (request, error) {
	d := wireDecoder{b: b}
	d.version()
	r := request{kind: requestKind(d.byte())}
	switch r.kind {
	case kindCommand, kindWaitAcquire:
		if d.err == nil {
			cmd, err := fsm.DecodeCommand(d.b)
			if err != nil {
				return request{}, fmt.Errorf("%w: command: %w", ErrBadRequest, err)
			}
			r.cmd, d.b = cmd, nil
		}
	case kindRead:
		r.key = d.string(fsm.MaxKeyLen)
		switch d.byte() {
		case 0:
		case 1:
			r.withOwner = true
			copy(r.owner[:], d.bytes(len(r.owner)))
		default:
			d.fail("owner flag")
		}
	case kindJoin, kindJoinEmpty:
		r.id = d.string(maxIDLen)
		r.addr = d.string(maxAddrLen)
	case kindRemove:
		r.id = d.string(maxIDLen)
	case kindList:
		r.prefix = d.string(fsm.MaxKeyLen)
		r.after = d.string(fsm.MaxKeyLen)
		r.limit = d.count()
	case kindInfo:
		r.id = d.string(maxIDLen)
		r.apiAddr = d.string(maxAddrLen)
	case kindIdentity:
		r.id = d.string(maxIDLen)
		r.clusterID = d.string(maxIDLen)
	case kindServerStats:
		r.id = d.string(maxIDLen)
		flags := d.byte()
		if flags&^3 != 0 {
			d.fail("health flags")
		}
		r.health.known, r.health.healthy = flags&1 != 0, flags&2 != 0
		r.health.tolerance = d.count()
		r.health.voters = d.count()
		r.health.healthyVoters = d.count()
	default:
		d.fail("request kind")
	}
	d.end()
	if d.err != nil {
		return request{}, d.err
	}
	return r, nil
}

// Limits on names in requests, generous but bounded.
const (
	maxIDLen   = 255
	maxAddrLen = 1024
	maxMsgLen  = 4096
)

func (r reply) appendBinary(b []byte) []byte {
	b = append(b, wireVersion, byte(r.code), byte(r.kind))
	switch r.code {
	case codeOK:
		switch r.kind {
		case kindCommand:
			b = append(b, byte(r.result.Status))
			b = binary.AppendUvarint(b, r.result.Token)
			b = binary.AppendVarint(b, int64(r.result.ExpiresAt))
			b = binary.AppendVarint(b, int64(r.result.Now))
			b = binary.AppendUvarint(b, uint64(max(r.result.Waiters, 0)))
		case kindWaitAcquire:
			b = append(b, byte(r.wait.status))
			b = binary.AppendUvarint(b, r.wait.token)
			b = binary.AppendVarint(b, int64(r.wait.remaining))
			b = binary.AppendUvarint(b, uint64(max(r.wait.waiters, 0)))
			b = binary.AppendVarint(b, int64(r.wait.ttl))
		case kindRead:
			var flags byte
			if r.read.held {
				flags |= 1
			}
			if r.read.mine {
				flags |= 2
			}
			b = append(b, flags)
			b = binary.AppendUvarint(b, r.read.token)
			b = binary.AppendVarint(b, int64(r.read.remaining))
			b = binary.AppendUvarint(b, uint64(max(r.read.waiters, 0)))
		case kindList:
			var flags byte
			if r.list.more {
				flags |= 1
			}
			b = append(b, flags)
			b = binary.AppendUvarint(b, uint64(len(r.list.locks)))
			for _, l := range r.list.locks {
				b = appendString(b, l.Key)
				b = binary.AppendUvarint(b, l.Token)
				b = binary.AppendVarint(b, int64(l.Remaining))
				b = binary.AppendUvarint(b, uint64(max(l.Waiters, 0)))
			}
		case kindInfo:
			b = appendString(b, r.info.id)
			b = appendString(b, r.info.apiAddr)
		case kindIdentity:
			b = appendString(b, r.info.id)
			b = appendString(b, r.info.clusterID)
		case kindServerStats:
			b = binary.AppendVarint(b, int64(r.stats.lastContact))
			b = binary.AppendUvarint(b, r.stats.lastTerm)
			b = binary.AppendUvarint(b, r.stats.lastIndex)
		}
	case codeNotLeader:
		b = appendString(b, r.leader)
	default:
		msg := r.msg
		if len(msg) > maxMsgLen {
			msg = msg[:maxMsgLen]
		}
		b = appendString(b, msg)
	}
	return b
}

// decodeReply never panics: bad bytes give an error matching ErrBadRequest.
func decodeReply(b []byte) (reply, error) {
	d := wireDecoder{b: b}
	d.version()
	r := reply{code: replyCode(d.byte()), kind: requestKind(d.byte())}
	switch r.code {
	case codeOK:
		switch r.kind {
		case kindCommand:
			r.result.Status = fsm.Status(d.byte())
			r.result.Token = d.uvarint()
			r.result.ExpiresAt = time.Duration(d.varint())
			r.result.Now = time.Duration(d.varint())
			r.result.Waiters = d.count()
		case kindWaitAcquire:
			r.wait.status = fsm.Status(d.byte())
			r.wait.token = d.uvarint()
			r.wait.remaining = time.Duration(d.varint())
			r.wait.waiters = d.count()
			r.wait.ttl = time.Duration(d.varint())
		case kindRead:
			flags := d.byte()
			if flags&^3 != 0 {
				d.fail("read flags")
			}
			r.read.held, r.read.mine = flags&1 != 0, flags&2 != 0
			r.read.token = d.uvarint()
			r.read.remaining = time.Duration(d.varint())
			r.read.waiters = d.count()
		case kindList:
			r.list = d.listPage()
		case kindInfo:
			r.info.id = d.string(maxIDLen)
			r.info.apiAddr = d.string(maxAddrLen)
		case kindIdentity:
			r.info.id = d.string(maxIDLen)
			r.info.clusterID = d.string(maxIDLen)
		case kindServerStats:
			r.stats.lastContact = time.Duration(d.varint())
			r.stats.lastTerm = d.uvarint()
			r.stats.lastIndex = d.uvarint()
		case kindJoin, kindJoinEmpty, kindRemove:
		default:
			d.fail("reply kind")
		}
	case codeNotLeader:
		r.leader = d.string(maxAddrLen)
	case codeLostLeadership, codeShuttingDown, codeBadRequest, codeUnavailable:
		r.msg = d.string(maxMsgLen)
	default:
		d.fail("reply code")
	}
	d.end()
	if d.err != nil {
		return reply{}, d.err
	}
	return r, nil
}

// listPage reads a kindList reply's body. Entries are appended as they are
// read (a count alone allocates nothing), so a lying count fails when the
// bytes run out.
func (d *wireDecoder) listPage() listPage {
	var p listPage
	flags := d.byte()
	if flags&^1 != 0 {
		d.fail("list flags")
	}
	p.more = flags&1 != 0
	n := d.uvarint()
	for i := uint64(0); i < n && d.err == nil; i++ {
		l := lock.LockInfo{Key: d.string(fsm.MaxKeyLen)}
		l.Locked = true
		l.Token = d.uvarint()
		l.Remaining = time.Duration(d.varint())
		l.Waiters = d.count()
		if d.err == nil {
			p.locks = append(p.locks, l)
		}
	}
	if d.err != nil {
		return listPage{}
	}
	return p
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// wireDecoder reads a message front to back; the first problem sticks in err
// and every later read returns a zero value.
type wireDecoder struct {
	b   []byte
	err error
}

func (d *wireDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: bad %s", ErrBadRequest, what)
	}
	d.b = nil
}

func (d *wireDecoder) version() {
	if v := d.byte(); d.err == nil && v != wireVersion {
		d.err = fmt.Errorf("%w: wire version %d, want %d", ErrBadRequest, v, wireVersion)
	}
}

func (d *wireDecoder) end() {
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
}

func (d *wireDecoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail("length")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *wireDecoder) bytes(n int) []byte {
	if d.err != nil || len(d.b) < n {
		d.fail("length")
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *wireDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *wireDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a non-negative int that fits any queue length.
func (d *wireDecoder) count() int {
	v := d.uvarint()
	if v > 1<<31 {
		d.fail("count")
		return 0
	}
	return int(v)
}

func (d *wireDecoder) string(limit int) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(limit) {
		d.fail("string length")
		return ""
	}
	return string(d.bytes(int(n)))
}
