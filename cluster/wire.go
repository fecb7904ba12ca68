package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

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
//	               [| string cluster ID: the joining node's, only when it knows one]
//	  kindJoinEmpty: as kindJoin
//	  kindRemove:  string id
//	  kindList:    string prefix | string after | uvarint limit (0: the leader's page size)
//	  kindInfo:    string id | string API address (the asking node's own, so one exchange informs both)
//	               [| uvarint command level: above fsm.BaselineLevel, or at it when a version follows
//	               [| string raftlock version: only when there is one]]
//	  kindWaitAcquire: an acquire (or acquire-all) with a wait, in the fsm encoding (as kindCommand)
//	  kindIdentity: string id | string cluster ID (the asking node's; empty if it knows none)
//	  kindSessionRead: 16-byte session ID
//	  kindServerStats: string id (the asking leader's) | health flags (1 known, 2 the asked node healthy) |
//	               uvarint failure tolerance | uvarint voters | uvarint healthy voters
//	  kindGroup:   uvarint n (1..maxGroupCommands) | n × (uvarint length | a command in its fsm encoding,
//	               as kindCommand: an acquire without wait, an acquire-all without wait, a release, an extend)
//	reply: version | code | kind | body
//	  codeOK, kindCommand: status | uvarint token | varint expiresAt | varint now | uvarint waiters
//	                       [| kind | uvarint limit: status kind-mismatch only, what the key is]
//	  codeOK, kindRead:    flags (1 held, 2 held by the asking owner, 4 metadata follows, 8 lock-delay,
//	                       16 kind follows, 32 extras follow) | uvarint token | varint remaining | uvarint waiters
//	                       [| string metadata] [| kind | uvarint limit | uvarint holders | flags (1 shared)]
//	                       [| extras]
//	  codeOK, kindWaitAcquire: status | uvarint token | varint remaining | uvarint waiters | varint ttl
//	                       [| kind | uvarint limit: status kind-mismatch only];
//	                       remaining counts from when the request reached the leader
//	  codeOK, kindJoin/kindJoinEmpty/kindRemove: empty
//	  codeOK, kindInfo:    string id | string API address (may be empty)
//	                       [| uvarint command level: as in a request, and only if the request had a level or a version
//	                       [| string raftlock version: only if the request had one]]
//	  codeOK, kindIdentity: string id | string cluster ID (may be empty)
//	  codeOK, kindSessionRead: flags (1 live) | varint ttl | varint remaining | varint lockDelay | uvarint keys
//	  codeOK, kindServerStats: varint last contact (ns; negative: never) | uvarint last log term | uvarint last log index
//	  codeOK, kindGroup:   uvarint n | n × (uvarint length | a whole kindCommand reply, version byte included):
//	                       the commands' replies in the request's order
//	  codeOK, kindList:    flags (1 more keys follow, 2 entries carry metadata, 4 entries carry kinds) |
//	                       uvarint count | count × (string key | uvarint token | varint remaining |
//	                       uvarint waiters [| string metadata | flags (1 lock-delay)]
//	                       [| kind | uvarint limit | uvarint holders | flags (1 shared)] [| extras])
//	               (list flags 8: entries carry extras)
//	  extras: uvarint n | n × (uvarint token | varint remaining | string metadata | flags (1 shared, 2 lock-delay))
//	          | uvarint m | m × string set key | flags (1 reserved)
//	          the holds of a semaphore or read/write key in grant order (at most maxReadHolds in a
//	          read, maxListHolds per key in a list: holders counts them all), the keys of the
//	          holder's multi-key grant, and whether a free key is kept for a multi-key waiter
//	  codeNotLeader: string leader address (may be empty)
//	  other codes: string message (codeWrongCluster answers kindJoin and kindJoinEmpty only)
//
// A hold's lock-delay flag is set only for a slot a lock-delay keeps (so
// holds without one read as before). The extras flags are set only when a key has holds, set keys or a
// reservation to tell. The metadata flags are set only when a holder has metadata (or a key is
// in a lock-delay), and the kind flags only for a semaphore or read/write
// key (kind is fsm.Kind's byte), so replies without them read as before.
//
// Integers are varints as encoding/binary writes them (signed ones
// zig-zag), read by fsm.Decoder, which takes only their shortest form.
//
// A multi-key acquire (fsm op 13, acquire-all) travels in kindCommand and
// kindWaitAcquire like any acquire, in its fsm encoding, and is answered
// in the same replies (for a kind-mismatch, waiters is the 1-based place of
// the key of another kind in the set); a leader too old to know op 13
// fails to decode it and answers codeBadRequest.
//
// Each kind is one struct (its request) with one answer struct, and one line
// of the kinds table, which is all the decoding, checking and serving code
// knows of it. To add a kind: give it the next unused number below; write its
// request type (appendBody, decodeBody, admit, serve: see rpcRequest) and its
// answer type (appendBody, decodeBody: see rpcAnswer; noAnswer when it
// answers nothing); add its line to kinds; describe its bytes above.
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
	// kindSessionRead: a linearizable read of one session, at the leader's
	// log time.
	kindSessionRead requestKind = 12
	// kindGroup: commands of concurrent callers on the asking node (an
	// HTTP batch's), queued for proposal together (group.go).
	kindGroup requestKind = 13
)

// maxListPage is the most keys one kindList reply carries. A listed key
// encodes in at most maxListEntryLen bytes, so a full page (about 2.2 MB,
// 6.5 MB if every holder has the largest metadata) stays well under
// transport.MaxFrameSize; a longer listing takes several pages.
const (
	maxListPage     = 4096
	maxListEntryLen = binary.MaxVarintLen64 + fsm.MaxKeyLen + 3*binary.MaxVarintLen64 + binary.MaxVarintLen64 + fsm.MaxMetaLen + 1 +
		1 + 2*binary.MaxVarintLen64 + 1 // kind, limit, holders, shared
)

// maxReadHolds and maxListHolds bound the holds one kindRead reply and
// one listed key carry (a hold encodes in at most maxHoldLen bytes), and
// listPageBudget the bytes of a list page's entries: with extras a page
// ends early (more) rather than pass it, so a reply stays well under
// transport.MaxFrameSize. Holders still counts every hold.
const (
	maxReadHolds   = 4096
	maxListHolds   = 8
	maxHoldLen     = 2*binary.MaxVarintLen64 + binary.MaxVarintLen64 + fsm.MaxMetaLen + 1
	listPageBudget = 8 << 20
)

// Limits on names in requests, generous but bounded.
const (
	maxIDLen   = 255
	maxAddrLen = 1024
	maxMsgLen  = 4096
)

// kindSpec is one line of the kinds table.
type kindSpec struct {
	name    string
	request func() rpcRequest // an empty request of the kind, to decode into
	answer  func() rpcAnswer  // an empty answer of the kind, to decode into
	anyNode bool              // any node serves it; the other kinds only the leader
}

// kinds is the one table of the forwarding RPC's request kinds: a line per kind.
var kinds = map[requestKind]kindSpec{
	kindCommand:     {"command", func() rpcRequest { return new(commandRequest) }, func() rpcAnswer { return new(commandAnswer) }, false},
	kindRead:        {"read", func() rpcRequest { return new(readRequest) }, func() rpcAnswer { return new(readResult) }, false},
	kindJoin:        {"join", func() rpcRequest { return new(joinRequest) }, func() rpcAnswer { return new(noAnswer) }, false},
	kindJoinEmpty:   {"join-empty", func() rpcRequest { return &joinRequest{empty: true} }, func() rpcAnswer { return new(noAnswer) }, false},
	kindRemove:      {"remove", func() rpcRequest { return new(removeRequest) }, func() rpcAnswer { return new(noAnswer) }, false},
	kindList:        {"list", func() rpcRequest { return new(listRequest) }, func() rpcAnswer { return new(listPage) }, false},
	kindInfo:        {"info", func() rpcRequest { return new(nodeInfo) }, func() rpcAnswer { return new(nodeInfo) }, true},
	kindWaitAcquire: {"wait-acquire", func() rpcRequest { return new(waitRequest) }, func() rpcAnswer { return new(waitAnswer) }, false},
	kindIdentity:    {"identity", func() rpcRequest { return new(nodeIdentity) }, func() rpcAnswer { return new(nodeIdentity) }, true},
	kindSessionRead: {"session-read", func() rpcRequest { return new(sessionRequest) }, func() rpcAnswer { return new(sessionResult) }, false},
	kindServerStats: {"server-stats", func() rpcRequest { return new(serverStatsRequest) }, func() rpcAnswer { return new(serverStats) }, true},
	kindGroup:       {"group", func() rpcRequest { return new(groupRequest) }, func() rpcAnswer { return new(groupAnswer) }, false},
}

func (k requestKind) String() string {
	if spec, ok := kinds[k]; ok {
		return spec.name
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// rpcRequest is the request of one kind.
type rpcRequest interface {
	kind() requestKind
	// appendBody appends the request's bytes after its kind.
	appendBody(b []byte) []byte
	// decodeBody reads what appendBody wrote.
	decodeBody(d *fsm.Decoder)
	// admit checks a request that came from another node, and bounds what it
	// asks to what one reply carries. (A request made on this node was
	// checked where it entered it: lock's Validate methods.)
	admit() error
	// serve answers the request on n; t is n's term while it leads. Kinds
	// served only by the leader get a t; the others may get nil. Its errors
	// are answered as replyErrors says.
	serve(ctx context.Context, n *Node, t *leaderTerm) (rpcAnswer, error)
}

// rpcAnswer is the answer of one kind (codeOK).
type rpcAnswer interface {
	appendBody(b []byte) []byte
	decodeBody(d *fsm.Decoder)
}

type replyCode byte

const (
	codeOK             replyCode = 1
	codeNotLeader      replyCode = 2 // not dispatched; the body hints at the leader
	codeLostLeadership replyCode = 3 // proposed, then leadership was lost: outcome unknown
	codeShuttingDown   replyCode = 4 // the leader is closing; outcome unknown
	codeBadRequest     replyCode = 5 // malformed or not allowed; retrying will not help
	codeUnavailable    replyCode = 6 // the leader could not do it now (e.g. a config change failed)
	// codeQuotaExceeded: the leader refused a command that would add state
	// past one of its quotas (quota.go); nothing was proposed. A node that
	// does not know the code fails the command with ErrBadRequest: refused
	// all the same, not retried.
	codeQuotaExceeded replyCode = 8
	// codeMemberTooOld: the leader refused a command some member cannot
	// read (levels.go); nothing was proposed. Only commands above
	// fsm.BaselineLevel get it, which a node that does not know the code
	// cannot have sent.
	codeMemberTooOld replyCode = 7
	// codeWrongCluster: the leader refused to add a node whose data dir
	// belongs to another cluster (admission.go). A node that does not know
	// the code fails its join with ErrBadRequest: refused all the same, not
	// retried.
	codeWrongCluster replyCode = 9
)

// replyErrors is the one table of the RPC's error codes: a line per error
// a serve may return (served), the code that answers it, and the error the
// asking node's attempt fails with (got; the first line of a code gives
// it). An error no line matches is answered codeUnavailable. A lock
// outcome is an answer (an fsm.Status), not an error; the codes say
// whether, and how, to retry, and the only lock errors that cross as
// errors are the leader's refusals before proposing (lock.ErrQuotaExceeded).
var replyErrors = []replyError{
	{errNotLeader, codeNotLeader, errNotLeader},
	{errLostLeadership, codeLostLeadership, errLostLeadership},
	{errShuttingDown, codeShuttingDown, errLeaderClosing},
	{ErrBadRequest, codeBadRequest, ErrBadRequest},
	{lock.ErrQuotaExceeded, codeQuotaExceeded, lock.ErrQuotaExceeded},
	{ErrMemberTooOld, codeMemberTooOld, ErrMemberTooOld},
	{ErrWrongCluster, codeWrongCluster, ErrWrongCluster},
	{nil, codeUnavailable, errLeaderUnavailable},
	// The caller gave up; nobody reads the answer. Say what is true of a command.
	{context.Canceled, codeLostLeadership, errLostLeadership},
	{context.DeadlineExceeded, codeLostLeadership, errLostLeadership},
}

type replyError struct {
	served error
	code   replyCode
	got    error
}

// To add a code: a new byte above, and a line here. A node that does not
// know a code reads the reply as malformed (ErrBadRequest, not retried), so
// a new code may only answer kinds that such a node cannot have asked, or
// needs every member upgraded first.

// replyCodeFor is the code answering a serve's error.
func replyCodeFor(err error) replyCode {
	for _, e := range replyErrors {
		if e.served != nil && errors.Is(err, e.served) {
			return e.code
		}
	}
	return codeUnavailable
}

// reply is one answer: an answer of the request's kind, or an error code.
type reply struct {
	code   replyCode
	kind   requestKind
	answer rpcAnswer // codeOK
	leader string    // codeNotLeader
	msg    string    // other codes
}

// err is the error an attempt answered with r fails with (see replyErrors);
// nil for codeOK.
func (r reply) err() error {
	if r.code == codeOK {
		return nil
	}
	for _, e := range replyErrors {
		if e.code == r.code {
			if r.code == codeNotLeader {
				return e.got // r.leader hints at the leader
			}
			// A message that starts with the error's own text (a lock
			// sentinel's, as served) is not said twice.
			return fmt.Errorf("%w: %s", e.got, strings.TrimPrefix(r.msg, e.got.Error()+": "))
		}
	}
	return fmt.Errorf("%w: reply code %d", ErrBadRequest, r.code)
}

func encodeRequest(req rpcRequest) []byte {
	return req.appendBody([]byte{wireVersion, byte(req.kind())})
}

// decodeRequest never panics: bad bytes give an error matching ErrBadRequest.
func decodeRequest(b []byte) (rpcRequest, error) {
	d, err := openMessage(b)
	if err != nil {
		return nil, err
	}
	k := requestKind(d.Byte())
	spec, ok := kinds[k]
	if d.Err() == nil && !ok {
		return nil, fmt.Errorf("%w: bad request kind %d", ErrBadRequest, k)
	}
	var req rpcRequest
	if ok {
		req = spec.request()
		req.decodeBody(d)
	}
	if err := d.End(); err != nil {
		return nil, fmt.Errorf("%w: %v request: %w", ErrBadRequest, k, err)
	}
	return req, nil
}

func (r reply) appendBinary(b []byte) []byte {
	b = append(b, wireVersion, byte(r.code), byte(r.kind))
	switch {
	case r.code == codeOK && r.answer == nil: // a serve's bug: the peer reads a malformed reply
		return b
	case r.code == codeOK:
		return r.answer.appendBody(b)
	case r.code == codeNotLeader:
		return appendString(b, r.leader)
	}
	return appendString(b, r.msg[:min(len(r.msg), maxMsgLen)])
}

// decodeReply never panics: bad bytes give an error matching ErrBadRequest.
func decodeReply(b []byte) (reply, error) {
	d, err := openMessage(b)
	if err != nil {
		return reply{}, err
	}
	r := reply{code: replyCode(d.Byte()), kind: requestKind(d.Byte())}
	switch spec, ok := kinds[r.kind]; {
	case r.code == codeOK && ok:
		r.answer = spec.answer()
		r.answer.decodeBody(d)
	case r.code == codeOK:
		d.Fail("reply kind")
	case r.code == codeNotLeader:
		r.leader = d.String(maxAddrLen)
	case slices.ContainsFunc(replyErrors, func(e replyError) bool { return e.code == r.code }):
		r.msg = d.String(maxMsgLen)
	default:
		d.Fail("reply code")
	}
	if err := d.End(); err != nil {
		return reply{}, fmt.Errorf("%w: %v reply: %w", ErrBadRequest, r.kind, err)
	}
	return r, nil
}

// openMessage checks a message's version and returns a decoder of the rest.
func openMessage(b []byte) (*fsm.Decoder, error) {
	switch {
	case len(b) == 0:
		return nil, fmt.Errorf("%w: empty message", ErrBadRequest)
	case b[0] != wireVersion:
		return nil, fmt.Errorf("%w: wire version %d, want %d", ErrBadRequest, b[0], wireVersion)
	}
	return fsm.NewDecoder(b[1:]), nil
}

// appendFlags appends one byte whose bit i is set when flags[i] is.
func appendFlags(b []byte, flags ...bool) []byte {
	var f byte
	for i, set := range flags {
		if set {
			f |= 1 << i
		}
	}
	return append(b, f)
}

// readFlags reads what appendFlags wrote for n flags; another bit set is a
// problem.
func readFlags(d *fsm.Decoder, what string, n int) []bool {
	f := d.Byte()
	if f>>n != 0 {
		d.Fail(what)
	}
	flags := make([]bool, n)
	for i := range flags {
		flags[i] = f&(1<<i) != 0
	}
	return flags
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// answered is a serve's answer a, or its error.
func answered[A any, P interface {
	*A
	rpcAnswer
}](a A, err error) (rpcAnswer, error) {
	if err != nil {
		return nil, err
	}
	return P(&a), nil
}

// The kinds, each a request type and an answer type.

// commandRequest (kindCommand) is a client command for the leader to stamp
// and propose; commandAnswer is its result.
type commandRequest struct{ cmd fsm.Command }

type commandAnswer struct{ res fsm.Result }

func (r *commandRequest) kind() requestKind { return kindCommand }

// appendBody appends the command's fsm encoding; an invalid command (which
// Validate at the entry rules out) appends nothing, and is refused.
func (r *commandRequest) appendBody(b []byte) []byte {
	b, _ = r.cmd.AppendBinary(b)
	return b
}

func (r *commandRequest) decodeBody(d *fsm.Decoder) { r.cmd = d.Command() }

// admit lets through the client commands (acquire, release, extend,
// cancel-wait, force-release, and the session ops), unstamped (only the leader stamps; the
// term's own commands are never forwarded). Decoding checked the command's
// limits.
func (r *commandRequest) admit() error {
	switch r.cmd.Op {
	case fsm.OpAcquire, fsm.OpRelease, fsm.OpExtend, fsm.OpCancelWait, fsm.OpForceRelease,
		fsm.OpSessionCreate, fsm.OpSessionRenew, fsm.OpSessionDestroy, fsm.OpAcquireAll:
	default:
		return fmt.Errorf("%w: %v may not be forwarded", ErrBadRequest, r.cmd.Op)
	}
	if r.cmd.Stamp != 0 {
		return fmt.Errorf("%w: forwarded command carries a stamp", ErrBadRequest)
	}
	return nil
}

func (r *commandRequest) serve(ctx context.Context, n *Node, t *leaderTerm) (rpcAnswer, error) {
	if r.cmd.Op == fsm.OpCancelWait {
		return answered(commandAnswerOf(n.cancelWaitAtLeader(ctx, t, r.cmd))) // see waiting.go
	}
	if err := n.admitQuota(ctx, t, r.cmd); err != nil {
		return nil, err // see quota.go
	}
	return answered(commandAnswerOf(t.propose(ctx, r.cmd)))
}

func commandAnswerOf(res fsm.Result, err error) (commandAnswer, error) {
	return commandAnswer{res}, err
}

func (a *commandAnswer) appendBody(b []byte) []byte {
	b = append(b, byte(a.res.Status))
	b = binary.AppendUvarint(b, a.res.Token)
	b = binary.AppendVarint(b, int64(a.res.ExpiresAt))
	b = binary.AppendVarint(b, int64(a.res.Now))
	b = binary.AppendUvarint(b, uint64(max(a.res.Waiters, 0)))
	if a.res.Status == fsm.StatusKindMismatch {
		b = appendKind(b, a.res.Kind, a.res.Limit)
	}
	return b
}

func (a *commandAnswer) decodeBody(d *fsm.Decoder) {
	a.res.Status = fsm.Status(d.Byte())
	a.res.Token = d.Uvarint()
	a.res.ExpiresAt = time.Duration(d.Varint())
	a.res.Now = time.Duration(d.Varint())
	a.res.Waiters = d.Count()
	if a.res.Status == fsm.StatusKindMismatch {
		a.res.Kind, a.res.Limit = readKind(d)
	}
}

// appendKind appends a key's kind and limit.
func appendKind(b []byte, kind fsm.Kind, limit int) []byte {
	return binary.AppendUvarint(append(b, byte(kind)), uint64(max(limit, 0)))
}

// readKind reads what appendKind wrote, within the machine's limits.
func readKind(d *fsm.Decoder) (fsm.Kind, int) {
	kind := fsm.Kind(d.Byte())
	limit := d.Uvarint()
	if kind > fsm.KindRW || limit > fsm.MaxHolders {
		d.Fail("kind or limit out of range")
		return 0, 0
	}
	return kind, int(limit)
}

// waitRequest (kindWaitAcquire) is an acquire with a wait, parked at the
// leader until its grant or the end of its wait (waiting.go). Its bytes are
// a command's.
type waitRequest struct{ commandRequest }

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
	// kind and limit, for a kind-mismatch: what the key is.
	kind  fsm.Kind
	limit int
}

func (r *waitRequest) kind() requestKind { return kindWaitAcquire }

func (r *waitRequest) admit() error {
	if (r.cmd.Op != fsm.OpAcquire && r.cmd.Op != fsm.OpAcquireAll) || r.cmd.Wait <= 0 {
		return fmt.Errorf("%w: a waiting acquire must be an acquire with a wait", ErrBadRequest)
	}
	return r.commandRequest.admit()
}

func (r *waitRequest) serve(ctx context.Context, n *Node, t *leaderTerm) (rpcAnswer, error) {
	return answered(n.waitAtLeader(ctx, t, r.cmd, n.clock.Monotonic()))
}

func (a *waitAnswer) appendBody(b []byte) []byte {
	b = append(b, byte(a.status))
	b = binary.AppendUvarint(b, a.token)
	b = binary.AppendVarint(b, int64(a.remaining))
	b = binary.AppendUvarint(b, uint64(max(a.waiters, 0)))
	b = binary.AppendVarint(b, int64(a.ttl))
	if a.status == fsm.StatusKindMismatch {
		b = appendKind(b, a.kind, a.limit)
	}
	return b
}

func (a *waitAnswer) decodeBody(d *fsm.Decoder) {
	a.status = fsm.Status(d.Byte())
	a.token = d.Uvarint()
	a.remaining = time.Duration(d.Varint())
	a.waiters = d.Count()
	a.ttl = time.Duration(d.Varint())
	if a.status == fsm.StatusKindMismatch {
		a.kind, a.limit = readKind(d)
	}
}

// readRequest (kindRead) is a linearizable read of one key at the leader's
// log time; with an owner, it also asks whether that owner holds it.
type readRequest struct {
	key       string
	owner     fsm.Owner
	withOwner bool
}

// readResult is what a read tells: never the holder's owner, only whether
// the asking owner is the holder.
type readResult struct {
	held      bool
	mine      bool
	token     uint64
	remaining time.Duration // the holder's lease left at the leader's log time when it answered
	waiters   int
	meta      string // the holder's metadata
	delayed   bool   // nobody holds it: a session's lock-delay runs
	// A semaphore or read/write key (kind not the mutex): its limit, its
	// holders, and whether readers hold it.
	kind    fsm.Kind
	limit   int
	holders int
	shared  bool
	// holds: a group key's holds, in grant order (remaining as above);
	// setKeys: the keys of the holder's multi-key grant; reserved: a free
	// key kept for a multi-key waiter.
	holds    []lock.HoldInfo
	setKeys  []string
	reserved bool
}

func (r *readRequest) kind() requestKind { return kindRead }

func (r *readRequest) appendBody(b []byte) []byte {
	b = appendFlags(appendString(b, r.key), r.withOwner)
	if r.withOwner {
		b = append(b, r.owner[:]...)
	}
	return b
}

func (r *readRequest) decodeBody(d *fsm.Decoder) {
	r.key = d.String(fsm.MaxKeyLen)
	if r.withOwner = readFlags(d, "owner flag", 1)[0]; r.withOwner {
		copy(r.owner[:], d.Bytes(len(r.owner)))
	}
}

func (r *readRequest) admit() error {
	if err := lock.ValidateKey(r.key); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if r.withOwner && r.owner.IsZero() {
		return fmt.Errorf("%w: zero owner", ErrBadRequest)
	}
	return nil
}

func (r *readRequest) serve(ctx context.Context, n *Node, t *leaderTerm) (rpcAnswer, error) {
	return answered(n.readAtLeader(ctx, t, r))
}

func (a *readResult) appendBody(b []byte) []byte {
	grouped := a.kind != fsm.KindMutex
	extras := hasExtras(a.holds, a.setKeys, a.reserved)
	b = appendFlags(b, a.held, a.mine, a.meta != "", a.delayed, grouped, extras)
	b = binary.AppendUvarint(b, a.token)
	b = binary.AppendVarint(b, int64(a.remaining))
	b = binary.AppendUvarint(b, uint64(max(a.waiters, 0)))
	if a.meta != "" {
		b = appendString(b, a.meta)
	}
	if grouped {
		b = appendGroup(b, a.kind, a.limit, a.holders, a.shared)
	}
	if extras {
		b = appendExtras(b, a.holds[:min(len(a.holds), maxReadHolds)], a.setKeys, a.reserved)
	}
	return b
}

func hasExtras(holds []lock.HoldInfo, setKeys []string, reserved bool) bool {
	return len(holds) > 0 || len(setKeys) > 0 || reserved
}

// appendExtras appends a key's holds, set keys and reservation.
func appendExtras(b []byte, holds []lock.HoldInfo, setKeys []string, reserved bool) []byte {
	b = binary.AppendUvarint(b, uint64(len(holds)))
	for _, h := range holds {
		b = binary.AppendUvarint(b, h.Token)
		b = binary.AppendVarint(b, int64(h.Remaining))
		b = appendFlags(appendString(b, h.Metadata), h.Shared, h.Delayed)
	}
	b = binary.AppendUvarint(b, uint64(len(setKeys)))
	for _, k := range setKeys {
		b = appendString(b, k)
	}
	return appendFlags(b, reserved)
}

// readExtras reads what appendExtras wrote, at most maxHolds holds. It
// appends as it reads, so a lying count fails when the bytes run out.
func readExtras(d *fsm.Decoder, maxHolds int) (holds []lock.HoldInfo, setKeys []string, reserved bool) {
	n := d.Uvarint()
	if n > uint64(maxHolds) {
		d.Fail("holds out of range")
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		h := lock.HoldInfo{Token: d.Uvarint(), Remaining: time.Duration(d.Varint()), Metadata: d.String(fsm.MaxMetaLen)}
		f := readFlags(d, "hold flags", 2)
		h.Shared, h.Delayed = f[0], f[1]
		holds = append(holds, h)
	}
	m := d.Uvarint()
	if m > fsm.MaxKeys {
		d.Fail("set keys out of range")
	}
	for i := uint64(0); i < m && d.Err() == nil; i++ {
		setKeys = append(setKeys, d.String(fsm.MaxKeyLen))
	}
	reserved = readFlags(d, "reserved flag", 1)[0]
	return holds, setKeys, reserved
}

func (a *readResult) decodeBody(d *fsm.Decoder) {
	f := readFlags(d, "read flags", 6)
	a.held, a.mine, a.delayed = f[0], f[1], f[3]
	a.token = d.Uvarint()
	a.remaining = time.Duration(d.Varint())
	a.waiters = d.Count()
	if f[2] {
		a.meta = d.String(fsm.MaxMetaLen)
	}
	if f[4] {
		a.kind, a.limit, a.holders, a.shared = readGroup(d, false)
	}
	if f[5] {
		a.holds, a.setKeys, a.reserved = readExtras(d, maxReadHolds)
	}
}

// appendGroup appends what a read tells of a semaphore or read/write key.
func appendGroup(b []byte, kind fsm.Kind, limit, holders int, shared bool) []byte {
	b = appendKind(b, kind, limit)
	b = binary.AppendUvarint(b, uint64(max(holders, 0)))
	return appendFlags(b, shared)
}

// readGroup reads what appendGroup wrote. A mutex has a group part only
// in a list page with kinds (mutex says so: then its part is all zero).
func readGroup(d *fsm.Decoder, mutex bool) (kind fsm.Kind, limit, holders int, shared bool) {
	kind, limit = readKind(d)
	if kind == fsm.KindMutex && !mutex {
		d.Fail("a mutex with a group part")
	}
	defer func() {
		if kind == fsm.KindMutex && (limit != 0 || holders != 0 || shared) {
			d.Fail("a mutex's group part not zero")
		}
	}()
	h := d.Uvarint()
	if h > fsm.MaxHolders {
		d.Fail("holders out of range")
	}
	return kind, limit, int(min(h, fsm.MaxHolders)), readFlags(d, "shared flag", 1)[0]
}

// listRequest (kindList) asks for a linearizable page of held keys at the
// leader's log time: keys with prefix, sorting after after, at most limit
// (0: the leader's page size).
type listRequest struct {
	prefix string
	after  string
	limit  int
}

// listPage is one kindList answer: held keys in byte order, never their
// owners, and whether more keys match after the last one.
type listPage struct {
	locks []lock.LockInfo // each Locked, Remaining at the leader's log time when it answered
	more  bool
}

func (r *listRequest) kind() requestKind { return kindList }

func (r *listRequest) appendBody(b []byte) []byte {
	b = appendString(b, r.prefix)
	b = appendString(b, r.after)
	return binary.AppendUvarint(b, uint64(max(r.limit, 0)))
}

func (r *listRequest) decodeBody(d *fsm.Decoder) {
	r.prefix = d.String(fsm.MaxKeyLen)
	r.after = d.String(fsm.MaxKeyLen)
	r.limit = d.Count()
}

// admit also bounds a forwarded listing to a page that fits a frame: a
// longer one is paged (more).
func (r *listRequest) admit() error {
	if err := (lock.ListRequest{Prefix: r.prefix, After: r.after, Limit: r.limit}).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if r.limit == 0 || r.limit > maxListPage {
		r.limit = maxListPage
	}
	return nil
}

func (r *listRequest) serve(ctx context.Context, n *Node, t *leaderTerm) (rpcAnswer, error) {
	return answered(n.listAtLeader(ctx, t, r))
}

func (a *listPage) appendBody(b []byte) []byte {
	withMeta, withKinds, withExtras := false, false, false
	for _, l := range a.locks {
		withMeta = withMeta || l.Metadata != "" || l.Delayed
		withKinds = withKinds || l.Kind != lock.KindMutex
		withExtras = withExtras || hasExtras(l.Holds, l.SetKeys, l.Reserved)
	}
	b = appendFlags(b, a.more, withMeta, withKinds, withExtras)
	b = binary.AppendUvarint(b, uint64(len(a.locks)))
	for _, l := range a.locks {
		b = appendString(b, l.Key)
		b = binary.AppendUvarint(b, l.Token)
		b = binary.AppendVarint(b, int64(l.Remaining))
		b = binary.AppendUvarint(b, uint64(max(l.Waiters, 0)))
		if withMeta {
			b = appendFlags(appendString(b, l.Metadata), l.Delayed)
		}
		if withKinds && l.Kind == lock.KindMutex {
			b = appendGroup(b, fsm.KindMutex, 0, 0, false) // a mutex's holders are in its flags
		} else if withKinds {
			b = appendGroup(b, fsm.Kind(l.Kind), l.Limit, l.Holders, l.Shared)
		}
		if withExtras {
			b = appendExtras(b, l.Holds[:min(len(l.Holds), maxListHolds)], l.SetKeys, l.Reserved)
		}
	}
	return b
}

// decodeBody appends entries as they are read (a count alone allocates
// nothing), so a lying count fails when the bytes run out.
func (a *listPage) decodeBody(d *fsm.Decoder) {
	f := readFlags(d, "list flags", 4)
	a.more = f[0]
	n := d.Uvarint()
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		l := lock.LockInfo{Key: d.String(fsm.MaxKeyLen)}
		l.Locked = true
		l.Token = d.Uvarint()
		l.Remaining = time.Duration(d.Varint())
		l.Waiters = d.Count()
		if f[1] {
			l.Metadata = d.String(fsm.MaxMetaLen)
			l.Delayed = readFlags(d, "lock-delay flag", 1)[0]
		}
		if f[2] {
			var kind fsm.Kind
			kind, l.Limit, l.Holders, l.Shared = readGroup(d, true)
			l.Kind = lock.Kind(kind)
		}
		if f[3] {
			l.Holds, l.SetKeys, l.Reserved = readExtras(d, maxListHolds)
		}
		if l.Kind == lock.KindMutex && !l.Delayed {
			l.Holders = 1
		}
		if d.Err() == nil {
			a.locks = append(a.locks, l)
		}
	}
}

// joinRequest (kindJoin; kindJoinEmpty when empty) asks the leader to add
// a server: see addMember. The cluster ID travels only when the joining
// node knows one, so a request without it has the bytes of the builds
// before it; such a build (a leader from before the field) refuses the
// trailing bytes, and join asks it again without them.
type joinRequest struct {
	id, addr  string
	empty     bool   // the joining node's data dir held no raft state
	clusterID string // the cluster its data dir belongs to; "" if none yet
}

func (r *joinRequest) kind() requestKind {
	if r.empty {
		return kindJoinEmpty
	}
	return kindJoin
}

func (r *joinRequest) appendBody(b []byte) []byte {
	b = appendString(appendString(b, r.id), r.addr)
	if r.clusterID != "" {
		b = appendString(b, r.clusterID)
	}
	return b
}

func (r *joinRequest) decodeBody(d *fsm.Decoder) {
	r.id = d.String(maxIDLen)
	r.addr = d.String(maxAddrLen)
	if d.More() {
		r.clusterID = d.String(maxIDLen)
		if d.Err() == nil && r.clusterID == "" {
			d.Fail("empty cluster ID")
		}
	}
}

func (r *joinRequest) admit() error {
	if r.id == "" || r.addr == "" {
		return fmt.Errorf("%w: join needs an id and an address", ErrBadRequest)
	}
	return nodeIDRequestError("join", r.id)
}

// nodeIDRequestError checks the node ID a request of another node carries.
func nodeIDRequestError(what, id string) error {
	if err := checkNodeID(id); err != nil {
		return fmt.Errorf("%w: %s from node ID %q, which %v", ErrBadRequest, what, id, err)
	}
	return nil
}

func (r *joinRequest) serve(ctx context.Context, n *Node, _ *leaderTerm) (rpcAnswer, error) {
	return &noAnswer{}, n.addMember(ctx, candidate{ID: raft.ServerID(r.id), Addr: raft.ServerAddress(r.addr), ClusterID: r.clusterID, Fresh: r.empty})
}

// removeRequest (kindRemove) asks the leader to remove a server (graceful
// leave): see removeServer.
type removeRequest struct{ id string }

func (r *removeRequest) kind() requestKind          { return kindRemove }
func (r *removeRequest) appendBody(b []byte) []byte { return appendString(b, r.id) }
func (r *removeRequest) decodeBody(d *fsm.Decoder)  { r.id = d.String(maxIDLen) }

func (r *removeRequest) admit() error {
	if r.id == "" {
		return fmt.Errorf("%w: remove needs an id", ErrBadRequest)
	}
	return nil
}

func (r *removeRequest) serve(ctx context.Context, n *Node, _ *leaderTerm) (rpcAnswer, error) {
	return &noAnswer{}, n.removeServer(ctx, r.id)
}

// noAnswer is the answer of kinds that answer only "done".
type noAnswer struct{}

func (*noAnswer) appendBody(b []byte) []byte { return b }
func (*noAnswer) decodeBody(*fsm.Decoder)    {}

// nodeInfo (kindInfo) is both the question and its answer: a node's ID, the
// address of its API (may be empty), the command level its build reads
// (levels.go) and its raftlock version. The asking node tells its own, so
// one exchange informs both (peers.go). Any node answers.
//
// The level travels only when it is above fsm.BaselineLevel (a node that
// tells none reads the baseline) or when a version follows it, and the
// version only when there is one; so a message without them has the bytes
// of the builds before them. An answer carries a level only when the
// question had a level or a version, and a version only when the question
// had one, since an older build refuses trailing bytes (and a level at the
// baseline); the asker retries without the fields an older node refuses
// (askInfo). A node at
// the baseline needs nobody's level: it proposes only baseline commands.
type nodeInfo struct {
	id, apiAddr string
	level       int    // 0 or fsm.BaselineLevel with no version: none told
	version     string // "": none told
}

// maxVersionLen bounds a version in kindInfo: a module version, such as
// v1.2.3-rc.1+incompatible, is far shorter.
const maxVersionLen = 128

func (r *nodeInfo) kind() requestKind { return kindInfo }
func (r *nodeInfo) admit() error      { return nodeIDRequestError("info", r.id) }
func (r *nodeInfo) hasLevel() bool    { return r.level > fsm.BaselineLevel }

func (r *nodeInfo) appendBody(b []byte) []byte {
	b = appendString(appendString(b, r.id), r.apiAddr)
	switch {
	case r.version != "":
		b = binary.AppendUvarint(b, uint64(max(r.level, fsm.BaselineLevel)))
		b = appendString(b, r.version[:min(len(r.version), maxVersionLen)])
	case r.hasLevel():
		b = binary.AppendUvarint(b, uint64(r.level))
	}
	return b
}

func (r *nodeInfo) decodeBody(d *fsm.Decoder) {
	r.id = d.String(maxIDLen)
	r.apiAddr = d.String(maxAddrLen)
	if !d.More() {
		return
	}
	l := d.Uvarint()
	// The baseline only with a version after it, so that a message has
	// one encoding.
	versioned := d.More()
	if d.Err() == nil && (l < fsm.BaselineLevel || l == fsm.BaselineLevel && !versioned || l > 1<<16) {
		d.Fail("command level out of range")
		return
	}
	r.level = int(l)
	if versioned {
		r.version = d.String(maxVersionLen)
		if d.Err() == nil && r.version == "" {
			d.Fail("empty version")
		}
	}
}

func (r *nodeInfo) serve(_ context.Context, n *Node, _ *leaderTerm) (rpcAnswer, error) {
	n.heardFrom(r.id, r.apiAddr, r.level, r.version)
	ans := &nodeInfo{id: n.cfg.NodeID, apiAddr: n.cfg.APIAddr}
	if r.hasLevel() || r.version != "" {
		ans.level = n.levels.max
	}
	if r.version != "" {
		ans.version = n.version
	}
	return ans, nil
}

// nodeIdentity (kindIdentity) is both the question and its answer: a node's
// ID and its cluster's ID (empty if it knows none), asked by a node about to
// join through the one it asks (identity.go). Any node answers.
type nodeIdentity struct{ id, clusterID string }

func (r *nodeIdentity) kind() requestKind { return kindIdentity }
func (r *nodeIdentity) appendBody(b []byte) []byte {
	return appendString(appendString(b, r.id), r.clusterID)
}
func (r *nodeIdentity) admit() error { return nodeIDRequestError("identity", r.id) }

func (r *nodeIdentity) decodeBody(d *fsm.Decoder) {
	r.id = d.String(maxIDLen)
	r.clusterID = d.String(maxIDLen)
}

func (r *nodeIdentity) serve(_ context.Context, n *Node, _ *leaderTerm) (rpcAnswer, error) {
	return n.identityReply(r), nil
}

// sessionRequest (kindSessionRead) is a linearizable read of one session at
// the leader's log time; sessionResult is what it tells.
type sessionRequest struct{ session fsm.Owner }

type sessionResult struct {
	live      bool
	ttl       time.Duration
	remaining time.Duration // at the leader's log time when it answered
	lockDelay time.Duration
	keys      int // keys the session holds or waits for
}

func (r *sessionRequest) kind() requestKind          { return kindSessionRead }
func (r *sessionRequest) appendBody(b []byte) []byte { return append(b, r.session[:]...) }
func (r *sessionRequest) decodeBody(d *fsm.Decoder)  { copy(r.session[:], d.Bytes(len(r.session))) }

func (r *sessionRequest) admit() error {
	if r.session.IsZero() {
		return fmt.Errorf("%w: zero session", ErrBadRequest)
	}
	return nil
}

// serverStatsRequest (kindServerStats) is the leader's question to a member
// for its serverStats, carrying the leader's health report for it
// (reconcile.go). Any node answers; only a report from the leader it knows
// is believed.
type serverStatsRequest struct {
	id     string // the asking leader's
	health healthReport
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

func (r *serverStatsRequest) kind() requestKind { return kindServerStats }

func (r *serverStatsRequest) appendBody(b []byte) []byte {
	b = appendString(b, r.id)
	b = appendFlags(b, r.health.known, r.health.healthy)
	b = binary.AppendUvarint(b, uint64(max(r.health.tolerance, 0)))
	b = binary.AppendUvarint(b, uint64(max(r.health.voters, 0)))
	return binary.AppendUvarint(b, uint64(max(r.health.healthyVoters, 0)))
}

func (r *serverStatsRequest) decodeBody(d *fsm.Decoder) {
	r.id = d.String(maxIDLen)
	flags := readFlags(d, "health flags", 2)
	r.health.known, r.health.healthy = flags[0], flags[1]
	r.health.tolerance = d.Count()
	r.health.voters = d.Count()
	r.health.healthyVoters = d.Count()
}

func (r *serverStatsRequest) admit() error {
	if r.id == "" {
		return fmt.Errorf("%w: server stats needs the asking leader's id", ErrBadRequest)
	}
	return nil
}

func (r *sessionRequest) serve(ctx context.Context, n *Node, t *leaderTerm) (rpcAnswer, error) {
	if err := n.readIndex(ctx, t); err != nil {
		return nil, err
	}
	a := n.sm.session(r.session, t.clock.now())
	return &a, nil
}

func (a *sessionResult) appendBody(b []byte) []byte {
	b = appendFlags(b, a.live)
	b = binary.AppendVarint(b, int64(a.ttl))
	b = binary.AppendVarint(b, int64(a.remaining))
	b = binary.AppendVarint(b, int64(a.lockDelay))
	return binary.AppendUvarint(b, uint64(max(a.keys, 0)))
}

func (a *sessionResult) decodeBody(d *fsm.Decoder) {
	a.live = readFlags(d, "session flags", 1)[0]
	a.ttl = time.Duration(d.Varint())
	a.remaining = time.Duration(d.Varint())
	a.lockDelay = time.Duration(d.Varint())
	a.keys = d.Count()
}

func (r *serverStatsRequest) serve(_ context.Context, n *Node, _ *leaderTerm) (rpcAnswer, error) {
	n.reconciler.heardFromLeader(r)
	st := n.ownServerStats()
	return &st, nil
}

// serverStats is what a member tells the leader about itself (kindServerStats).
type serverStats struct {
	lastContact time.Duration // since it last heard from the leader; negative: never
	lastTerm    uint64        // term of its last log entry
	lastIndex   uint64        // index of its last log entry
}

func (a *serverStats) appendBody(b []byte) []byte {
	b = binary.AppendVarint(b, int64(a.lastContact))
	b = binary.AppendUvarint(b, a.lastTerm)
	return binary.AppendUvarint(b, a.lastIndex)
}

func (a *serverStats) decodeBody(d *fsm.Decoder) {
	a.lastContact = time.Duration(d.Varint())
	a.lastTerm = d.Uvarint()
	a.lastIndex = d.Uvarint()
}

// groupRequest (kindGroup) is the commands of a CommandGroup; groupAnswer
// holds one kindCommand reply per command, in order.
type groupRequest struct{ cmds []fsm.Command }

type groupAnswer struct{ replies []reply }

// maxGroupCommands bounds the commands of one kindGroup message (an HTTP
// batch's worth): so many of the largest commands a group carries (an
// acquire-all of fsm.MaxKeys keys of fsm.MaxKeyLen bytes, with
// fsm.MaxMetaLen of metadata) stay well under transport.MaxFrameSize
// (TestFullGroupFitsAFrame), so a group never needs a byte budget.
const maxGroupCommands = 256

func (r *groupRequest) kind() requestKind { return kindGroup }

func (r *groupRequest) appendBody(b []byte) []byte {
	return appendGroupParts(b, len(r.cmds), func(b []byte, i int) []byte {
		b, _ = r.cmds[i].AppendBinary(b)
		return b
	})
}

func (r *groupRequest) decodeBody(d *fsm.Decoder) {
	readGroupParts(d, "group command", func(n int) { r.cmds = make([]fsm.Command, 0, n) }, func(part []byte) bool {
		sub := fsm.NewDecoder(part)
		c := sub.Command()
		r.cmds = append(r.cmds, c)
		return sub.End() == nil
	})
}

// appendGroupParts appends n parts of a group message, each as its length
// and the bytes part appends for it.
func appendGroupParts(b []byte, n int, part func(b []byte, i int) []byte) []byte {
	b = binary.AppendUvarint(b, uint64(n))
	var scratch []byte
	for i := range n {
		scratch = part(scratch[:0], i)
		b = binary.AppendUvarint(b, uint64(len(scratch)))
		b = append(b, scratch...)
	}
	return b
}

// readGroupParts reads what appendGroupParts wrote: 1 to maxGroupCommands
// parts (sized is told how many), each handed to read, which says whether
// it was well formed.
func readGroupParts(d *fsm.Decoder, what string, sized func(n int), read func(part []byte) bool) {
	n := d.Count()
	if d.Err() == nil && (n < 1 || n > maxGroupCommands) {
		d.Fail("group size")
		return
	}
	sized(n)
	for range n {
		part := d.Bytes(d.Count())
		if d.Err() != nil {
			return
		}
		if !read(part) {
			d.Fail(what)
			return
		}
	}
}

// admit lets through the commands a group carries (groupable), each as
// kindCommand admits it.
func (r *groupRequest) admit() error {
	for i, c := range r.cmds {
		if !groupable(c) {
			return fmt.Errorf("%w: group command %d: %v (wait %v) does not travel in a group", ErrBadRequest, i, c.Op, c.Wait)
		}
		if err := (&commandRequest{c}).admit(); err != nil {
			return fmt.Errorf("group command %d: %w", i, err)
		}
	}
	return nil
}

// serve checks each command's quota, queues every admitted command for
// proposal at once (so that they share an entry), and answers each with
// the reply it would have had alone.
func (r *groupRequest) serve(ctx context.Context, n *Node, t *leaderTerm) (rpcAnswer, error) {
	ans := &groupAnswer{replies: make([]reply, len(r.cmds))}
	queued := make([]int, 0, len(r.cmds)) // the index of each admitted command
	cmds := make([]fsm.Command, 0, len(r.cmds))
	for i, c := range r.cmds {
		if err := n.admitQuota(ctx, t, c); err != nil {
			ans.replies[i] = n.errorReply(kindCommand, err)
			continue
		}
		queued = append(queued, i)
		cmds = append(cmds, c)
	}
	ps, errs := t.enqueueAll(cmds)
	for j, i := range queued {
		res, err := fsm.Result{}, errs[j]
		if err == nil {
			res, err = t.await(ctx, ps[j])
		}
		if err != nil {
			ans.replies[i] = n.errorReply(kindCommand, err)
		} else {
			ans.replies[i] = reply{code: codeOK, kind: kindCommand, answer: &commandAnswer{res}}
		}
	}
	return ans, nil
}

func (a *groupAnswer) appendBody(b []byte) []byte {
	return appendGroupParts(b, len(a.replies), func(b []byte, i int) []byte { return a.replies[i].appendBinary(b) })
}

func (a *groupAnswer) decodeBody(d *fsm.Decoder) {
	readGroupParts(d, "group reply", func(n int) { a.replies = make([]reply, 0, n) }, func(part []byte) bool {
		r, err := decodeReply(part)
		a.replies = append(a.replies, r)
		return err == nil && r.kind == kindCommand
	})
}
