package nodewire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/errcode"
	"github.com/raftlock/raftlock/lock"
)

// Version is the first byte of every message (see the package doc).
const Version = 1

// Kind is a request's kind, the byte after the version.
type Kind byte

const (
	KindCommand Kind = 1 // a lock command for the leader to stamp and propose
	KindRead    Kind = 2 // a linearizable read of one key, at the leader's log time
	KindJoin    Kind = 3 // add a voter
	KindRemove  Kind = 4 // remove a server (graceful leave)
	KindList    Kind = 5 // a linearizable page of held keys, at the leader's log time
	// 6 was KindAwait; retired, never reuse.
	KindInfo        Kind = 7 // any node (leader or not) tells who it is and where its API is
	KindWaitAcquire Kind = 8 // an acquire that may wait, parked at the leader until its grant or the end of its wait
	// KindIdentity: any node (leader or not) tells its node and cluster IDs,
	// asked by a node about to join through it.
	KindIdentity Kind = 9
	// KindJoinEmpty: add a node whose data dir held no raft state; a member
	// of that ID (its data dir emptied) is removed first, see package cluster's addMember.
	KindJoinEmpty Kind = 10
	// KindServerStats: the leader asks any member (leader or not) for its
	// log position and last contact, telling it the cluster's health
	// (package cluster).
	KindServerStats Kind = 11
	// KindSessionRead: a linearizable read of one session, at the leader's
	// log time.
	KindSessionRead Kind = 12
	// KindGroup: commands of concurrent callers on the asking node (an
	// HTTP batch's), queued for proposal together (package cluster).
	KindGroup Kind = 13
)

// MaxListPage is the most keys one KindList reply carries. A listed key
// encodes in at most MaxListEntryLen bytes, so a full page (about 2.2 MB,
// 6.5 MB if every holder has the largest metadata) stays well under
// transport.MaxFrameSize; a longer listing takes several pages.
const (
	MaxListPage     = 4096
	MaxListEntryLen = binary.MaxVarintLen64 + fsm.MaxKeyLen + 3*binary.MaxVarintLen64 + binary.MaxVarintLen64 + fsm.MaxMetaLen + 1 +
		1 + 2*binary.MaxVarintLen64 + 1 // kind, limit, holders, shared
)

// MaxReadHolds and MaxListHolds bound the holds one KindRead reply and
// one listed key carry (a hold encodes in at most MaxHoldLen bytes), and
// ListPageBudget the bytes of a list page's entries: with extras a page
// ends early (more) rather than pass it, so a reply stays well under
// transport.MaxFrameSize. Holders still counts every hold.
const (
	MaxReadHolds   = 4096
	MaxListHolds   = 8
	MaxHoldLen     = 2*binary.MaxVarintLen64 + binary.MaxVarintLen64 + fsm.MaxMetaLen + 1
	ListPageBudget = 8 << 20
)

// Limits on names in requests, generous but bounded.
const (
	MaxIDLen   = 255
	MaxAddrLen = 1024
	maxMsgLen  = 4096
)

// kindSpec is one line of the kinds table.
type kindSpec struct {
	name    string
	request func() Request // an empty request of the kind, to decode into
	// answer is an empty answer of the kind, to decode into: into, emptied,
	// when it is of the kind's answer type, else a fresh one.
	answer func(into Answer) Answer
}

// kinds is the one table of the forwarding RPC's request kinds: a line per kind.
var kinds = map[Kind]kindSpec{
	KindCommand:     {"command", func() Request { return new(Command) }, emptyAnswer[CommandAnswer]},
	KindRead:        {"read", func() Request { return new(Read) }, emptyAnswer[ReadResult]},
	KindJoin:        {"join", func() Request { return new(Join) }, emptyAnswer[NoAnswer]},
	KindJoinEmpty:   {"join-empty", func() Request { return &Join{Empty: true} }, emptyAnswer[NoAnswer]},
	KindRemove:      {"remove", func() Request { return new(Remove) }, emptyAnswer[NoAnswer]},
	KindList:        {"list", func() Request { return new(List) }, emptyAnswer[ListPage]},
	KindInfo:        {"info", func() Request { return new(Info) }, emptyAnswer[Info]},
	KindWaitAcquire: {"wait-acquire", func() Request { return new(WaitAcquire) }, emptyAnswer[WaitAnswer]},
	KindIdentity:    {"identity", func() Request { return new(Identity) }, emptyAnswer[Identity]},
	KindSessionRead: {"session-read", func() Request { return new(SessionRead) }, emptyAnswer[SessionResult]},
	KindServerStats: {"server-stats", func() Request { return new(ServerStatsRequest) }, emptyAnswer[ServerStats]},
	KindGroup:       {"group", func() Request { return new(Group) }, emptyAnswer[GroupAnswer]},
}

// emptyAnswer is a kindSpec's answer for answers of type A.
func emptyAnswer[A any, P interface {
	*A
	Answer
}](into Answer) Answer {
	p, ok := into.(P)
	if !ok {
		return P(new(A))
	}
	*p = *new(A) // nothing of what it held before is read as this reply's
	return p
}

// Kinds lists every request kind, in byte order.
func Kinds() []Kind {
	return slices.Sorted(maps.Keys(kinds))
}

func (k Kind) String() string {
	if spec, ok := kinds[k]; ok {
		return spec.name
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// Request is the request of one kind.
type Request interface {
	Kind() Kind
	// appendBody appends the request's bytes after its kind.
	appendBody(b []byte) []byte
	// decodeBody reads what appendBody wrote.
	decodeBody(d *fsm.Decoder)
}

// Answer is the answer of one kind (CodeOK).
type Answer interface {
	appendBody(b []byte) []byte
	decodeBody(d *fsm.Decoder)
}

// Code is a reply's code, the byte after the version: CodeOK or an error.
type Code byte

const (
	CodeOK             Code = 1
	CodeNotLeader      Code = 2 // not dispatched; the body hints at the leader
	CodeLostLeadership Code = 3 // proposed, then leadership was lost: outcome unknown
	CodeShuttingDown   Code = 4 // the leader is closing; outcome unknown
	CodeBadRequest     Code = 5 // malformed or not allowed; retrying will not help
	CodeUnavailable    Code = 6 // the leader could not do it now (e.g. a config change failed)
	// CodeQuotaExceeded: the leader refused a command that would add state
	// past one of its quotas (package cluster); nothing was proposed. A node that
	// does not know the code fails the command with ErrBadRequest: refused
	// all the same, not retried.
	CodeQuotaExceeded Code = 8
	// CodeMemberTooOld: the leader refused a command some member cannot
	// read (package cluster); nothing was proposed. Only commands above
	// fsm.BaselineLevel get it, which a node that does not know the code
	// cannot have sent.
	CodeMemberTooOld Code = 7
	// CodeWrongCluster: the leader refused to add a node whose data dir
	// belongs to another cluster (package cluster). A node that does not know
	// the code fails its join with ErrBadRequest: refused all the same, not
	// retried.
	CodeWrongCluster Code = 9
)

// replyErrors is the one table of the RPC's error codes: a line per error
// a request's handler may return (served), the code that answers it, and the error the
// asking node's attempt fails with (got; the first line of a code gives
// it). An error no line matches is answered CodeUnavailable. A lock
// outcome is an answer (an fsm.Status), not an error; the codes say
// whether, and how, to retry, and the only lock errors that cross as
// errors are the leader's refusals before proposing (lock.ErrQuotaExceeded).
var replyErrors = []replyError{
	{ErrNotLeader, CodeNotLeader, ErrNotLeader},
	{ErrLostLeadership, CodeLostLeadership, ErrLostLeadership},
	{ErrShuttingDown, CodeShuttingDown, ErrLeaderClosing},
	{ErrBadRequest, CodeBadRequest, ErrBadRequest},
	{lock.ErrQuotaExceeded, CodeQuotaExceeded, lock.ErrQuotaExceeded},
	{errcode.ErrMemberTooOld, CodeMemberTooOld, errcode.ErrMemberTooOld},
	{ErrWrongCluster, CodeWrongCluster, ErrWrongCluster},
	{nil, CodeUnavailable, ErrLeaderUnavailable},
	// The caller gave up; nobody reads the answer. Say what is true of a command.
	{context.Canceled, CodeLostLeadership, ErrLostLeadership},
	{context.DeadlineExceeded, CodeLostLeadership, ErrLostLeadership},
}

type replyError struct {
	served error
	code   Code
	got    error
}

// To add a code: a new byte above, and a line here. A node that does not
// know a code reads the reply as malformed (ErrBadRequest, not retried), so
// a new code may only answer kinds that such a node cannot have asked, or
// needs every member upgraded first.

// CodeFor is the code answering the error of a request's handler.
func CodeFor(err error) Code {
	for _, e := range replyErrors {
		if e.served != nil && errors.Is(err, e.served) {
			return e.code
		}
	}
	return CodeUnavailable
}

// Reply is one answer: an answer of the request's kind, or an error code.
type Reply struct {
	Code   Code
	Kind   Kind
	Answer Answer // CodeOK
	Leader string // CodeNotLeader
	Msg    string // other codes
}

// Err is the error an attempt answered with r fails with (see replyErrors);
// nil for CodeOK.
func (r Reply) Err() error {
	if r.Code == CodeOK {
		return nil
	}
	for _, e := range replyErrors {
		if e.code == r.Code {
			if r.Code == CodeNotLeader {
				return e.got // r.leader hints at the leader
			}
			// A message that starts with the error's own text (a lock
			// sentinel's, as served) is not said twice.
			return fmt.Errorf("%w: %s", e.got, strings.TrimPrefix(r.Msg, e.got.Error()+": "))
		}
	}
	return fmt.Errorf("%w: reply code %d", ErrBadRequest, r.Code)
}

// EncodeRequest is req's message: version, kind and body.
func EncodeRequest(req Request) []byte {
	return req.appendBody([]byte{Version, byte(req.Kind())})
}

// DecodeRequest never panics: bad bytes give an error matching ErrBadRequest.
func DecodeRequest(b []byte) (Request, error) {
	d, err := openMessage(b)
	if err != nil {
		return nil, err
	}
	k := Kind(d.Byte())
	spec, ok := kinds[k]
	if d.Err() == nil && !ok {
		return nil, fmt.Errorf("%w: bad request kind %d", ErrBadRequest, k)
	}
	var req Request
	if ok {
		req = spec.request()
		req.decodeBody(d)
	}
	if err := closeMessage(d); err != nil {
		return nil, fmt.Errorf("%w: %v request: %w", ErrBadRequest, k, err)
	}
	return req, nil
}

// AppendBinary appends r's message: version, code, kind and body.
func (r Reply) AppendBinary(b []byte) []byte {
	b = appendReplyHead(b, r.Code, r.Kind)
	switch {
	case r.Code == CodeOK && r.Answer == nil: // a handler's bug: the peer reads a malformed reply
		return b
	case r.Code == CodeOK:
		return r.Answer.appendBody(b)
	case r.Code == CodeNotLeader:
		return appendString(b, r.Leader)
	}
	return appendString(b, r.Msg[:min(len(r.Msg), maxMsgLen)])
}

func appendReplyHead(b []byte, code Code, kind Kind) []byte {
	return append(b, Version, byte(code), byte(kind))
}

// AppendReply appends the reply answering a KindCommand request with a:
// Reply{Code: CodeOK, Kind: KindCommand, Answer: a}.AppendBinary's bytes.
// Unlike an Answer in a Reply, a stays where it is (on the caller's
// stack): most requests a leader answers are commands.
func (a *CommandAnswer) AppendReply(b []byte) []byte {
	return a.appendBody(appendReplyHead(b, CodeOK, KindCommand))
}

// DecodeReply never panics: bad bytes give an error matching ErrBadRequest.
func DecodeReply(b []byte) (Reply, error) { return DecodeReplyInto(b, nil) }

// DecodeReplyInto is DecodeReply reading the answer into into (emptied
// first) when into is of the reply's kind's answer type, rather than into
// a fresh answer: a caller that keeps room for the answer of the kind it
// asks, beside its request, spares an allocation. The Reply's Answer is
// then into.
func DecodeReplyInto(b []byte, into Answer) (Reply, error) {
	d, err := openMessage(b)
	if err != nil {
		return Reply{}, err
	}
	r := Reply{Code: Code(d.Byte()), Kind: Kind(d.Byte())}
	switch spec, ok := kinds[r.Kind]; {
	case r.Code == CodeOK && ok:
		r.Answer = spec.answer(into)
		r.Answer.decodeBody(d)
	case r.Code == CodeOK:
		d.Fail("reply kind")
	case r.Code == CodeNotLeader:
		r.Leader = d.String(MaxAddrLen)
	case slices.ContainsFunc(replyErrors, func(e replyError) bool { return e.code == r.Code }):
		r.Msg = d.String(maxMsgLen)
	default:
		d.Fail("reply code")
	}
	if err := closeMessage(d); err != nil {
		return Reply{}, fmt.Errorf("%w: %v reply: %w", ErrBadRequest, r.Kind, err)
	}
	return r, nil
}

// decoders keeps the decoders of messages read before, for the next:
// decodeBody, an interface method, makes a message's decoder escape, and
// a fresh one per message would be garbage of every forwarded request and
// reply.
var decoders = sync.Pool{New: func() any { return new(fsm.Decoder) }}

// openMessage checks a message's version and returns a decoder of the
// rest; closeMessage hands it back.
func openMessage(b []byte) (*fsm.Decoder, error) {
	switch {
	case len(b) == 0:
		return nil, fmt.Errorf("%w: empty message", ErrBadRequest)
	case b[0] != Version:
		return nil, fmt.Errorf("%w: wire version %d, want %d", ErrBadRequest, b[0], Version)
	}
	d := decoders.Get().(*fsm.Decoder)
	*d = *fsm.NewDecoder(b[1:]) // nothing of the message it read before: its place, its error
	return d, nil
}

// closeMessage ends d's message (d.End's error) and hands d back to
// decoders, keeping nothing of the message alive.
func closeMessage(d *fsm.Decoder) error {
	err := d.End()
	*d = fsm.Decoder{}
	decoders.Put(d)
	return err
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

// Command (KindCommand) is a client command for the leader to stamp
// and propose; CommandAnswer is its result.
type Command struct{ Cmd fsm.Command }

type CommandAnswer struct{ Res fsm.Result }

func (r *Command) Kind() Kind { return KindCommand }

// appendBody appends the command's fsm encoding; an invalid command (which
// Validate at the entry rules out) appends nothing, and is refused.
func (r *Command) appendBody(b []byte) []byte {
	b, _ = r.Cmd.AppendBinary(b)
	return b
}

func (r *Command) decodeBody(d *fsm.Decoder) { r.Cmd = d.Command() }

func (a *CommandAnswer) appendBody(b []byte) []byte {
	b = append(b, byte(a.Res.Status))
	b = binary.AppendUvarint(b, a.Res.Token)
	b = binary.AppendVarint(b, int64(a.Res.ExpiresAt))
	b = binary.AppendVarint(b, int64(a.Res.Now))
	b = binary.AppendUvarint(b, uint64(max(a.Res.Waiters, 0)))
	if a.Res.Status == fsm.StatusKindMismatch {
		b = appendKind(b, a.Res.Kind, a.Res.Limit)
	}
	return b
}

func (a *CommandAnswer) decodeBody(d *fsm.Decoder) {
	a.Res.Status = fsm.Status(d.Byte())
	a.Res.Token = d.Uvarint()
	a.Res.ExpiresAt = time.Duration(d.Varint())
	a.Res.Now = time.Duration(d.Varint())
	a.Res.Waiters = d.Count()
	if a.Res.Status == fsm.StatusKindMismatch {
		a.Res.Kind, a.Res.Limit = readKind(d)
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

// WaitAcquire (KindWaitAcquire) is an acquire with a wait, parked at the
// leader until its grant or the end of its wait (package cluster). Its bytes are
// a command's.
type WaitAcquire struct{ Command }

// WaitAnswer is how a waiting acquire ended at the leader: granted (token
// and remaining are the owner's lease, remaining counted from when the
// request reached the leader), held (the wait ran out; token and remaining
// describe the holder, if any), or queue-full.
type WaitAnswer struct {
	Status    fsm.Status
	Token     uint64
	Remaining time.Duration
	Waiters   int
	// TTL, for a grant, is the lease's term: the TTL asked, for a new grant
	// or a hand-off; what the lease had left at its stamp, for a repeat by
	// the holder (lock.Lease.TTL).
	TTL time.Duration
	// Kind and limit, for a Kind-mismatch: what the key is.
	Kind  fsm.Kind
	Limit int
}

func (r *WaitAcquire) Kind() Kind { return KindWaitAcquire }

func (a *WaitAnswer) appendBody(b []byte) []byte {
	b = append(b, byte(a.Status))
	b = binary.AppendUvarint(b, a.Token)
	b = binary.AppendVarint(b, int64(a.Remaining))
	b = binary.AppendUvarint(b, uint64(max(a.Waiters, 0)))
	b = binary.AppendVarint(b, int64(a.TTL))
	if a.Status == fsm.StatusKindMismatch {
		b = appendKind(b, a.Kind, a.Limit)
	}
	return b
}

func (a *WaitAnswer) decodeBody(d *fsm.Decoder) {
	a.Status = fsm.Status(d.Byte())
	a.Token = d.Uvarint()
	a.Remaining = time.Duration(d.Varint())
	a.Waiters = d.Count()
	a.TTL = time.Duration(d.Varint())
	if a.Status == fsm.StatusKindMismatch {
		a.Kind, a.Limit = readKind(d)
	}
}

// Read (KindRead) is a linearizable read of one key at the leader's
// log time; with an owner, it also asks whether that owner holds it.
type Read struct {
	Key       string
	Owner     fsm.Owner
	WithOwner bool
}

// ReadResult is what a read tells: never the holder's owner, only whether
// the asking owner is the holder.
type ReadResult struct {
	Held      bool
	Mine      bool
	Token     uint64
	Remaining time.Duration // the holder's lease left at the leader's log time when it answered
	Waiters   int
	Meta      string // the holder's metadata
	Delayed   bool   // nobody holds it: a session's lock-delay runs
	// A semaphore or read/write key (Kind not the mutex): its limit, its
	// holders, and whether readers hold it.
	Kind    fsm.Kind
	Limit   int
	Holders int
	Shared  bool
	// Holds: a group key's Holds, in grant order (remaining as above);
	// setKeys: the keys of the holder's multi-key grant; reserved: a free
	// key kept for a multi-key waiter.
	Holds    []lock.HoldInfo
	SetKeys  []string
	Reserved bool
}

func (r *Read) Kind() Kind { return KindRead }

func (r *Read) appendBody(b []byte) []byte {
	b = appendFlags(appendString(b, r.Key), r.WithOwner)
	if r.WithOwner {
		b = append(b, r.Owner[:]...)
	}
	return b
}

func (r *Read) decodeBody(d *fsm.Decoder) {
	r.Key = d.String(fsm.MaxKeyLen)
	if r.WithOwner = readFlags(d, "owner flag", 1)[0]; r.WithOwner {
		copy(r.Owner[:], d.Bytes(len(r.Owner)))
	}
}

func (a *ReadResult) appendBody(b []byte) []byte {
	grouped := a.Kind != fsm.KindMutex
	extras := hasExtras(a.Holds, a.SetKeys, a.Reserved)
	b = appendFlags(b, a.Held, a.Mine, a.Meta != "", a.Delayed, grouped, extras)
	b = binary.AppendUvarint(b, a.Token)
	b = binary.AppendVarint(b, int64(a.Remaining))
	b = binary.AppendUvarint(b, uint64(max(a.Waiters, 0)))
	if a.Meta != "" {
		b = appendString(b, a.Meta)
	}
	if grouped {
		b = appendGroup(b, a.Kind, a.Limit, a.Holders, a.Shared)
	}
	if extras {
		b = appendExtras(b, a.Holds[:min(len(a.Holds), MaxReadHolds)], a.SetKeys, a.Reserved)
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

func (a *ReadResult) decodeBody(d *fsm.Decoder) {
	f := readFlags(d, "read flags", 6)
	a.Held, a.Mine, a.Delayed = f[0], f[1], f[3]
	a.Token = d.Uvarint()
	a.Remaining = time.Duration(d.Varint())
	a.Waiters = d.Count()
	if f[2] {
		a.Meta = d.String(fsm.MaxMetaLen)
	}
	if f[4] {
		a.Kind, a.Limit, a.Holders, a.Shared = readGroup(d, false)
	}
	if f[5] {
		a.Holds, a.SetKeys, a.Reserved = readExtras(d, MaxReadHolds)
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

// List (KindList) asks for a linearizable page of held keys at the
// leader's log time: keys with prefix, sorting after after, at most limit
// (0: the leader's page size).
type List struct {
	Prefix string
	After  string
	Limit  int
}

// ListPage is one KindList answer: held keys in byte order, never their
// owners, and whether more keys match after the last one.
type ListPage struct {
	Locks []lock.LockInfo // each Locked, Remaining at the leader's log time when it answered
	More  bool
}

func (r *List) Kind() Kind { return KindList }

func (r *List) appendBody(b []byte) []byte {
	b = appendString(b, r.Prefix)
	b = appendString(b, r.After)
	return binary.AppendUvarint(b, uint64(max(r.Limit, 0)))
}

func (r *List) decodeBody(d *fsm.Decoder) {
	r.Prefix = d.String(fsm.MaxKeyLen)
	r.After = d.String(fsm.MaxKeyLen)
	r.Limit = d.Count()
}

func (a *ListPage) appendBody(b []byte) []byte {
	withMeta, withKinds, withExtras := false, false, false
	for _, l := range a.Locks {
		withMeta = withMeta || l.Metadata != "" || l.Delayed
		withKinds = withKinds || l.Kind != lock.KindMutex
		withExtras = withExtras || hasExtras(l.Holds, l.SetKeys, l.Reserved)
	}
	b = appendFlags(b, a.More, withMeta, withKinds, withExtras)
	b = binary.AppendUvarint(b, uint64(len(a.Locks)))
	for _, l := range a.Locks {
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
			b = appendExtras(b, l.Holds[:min(len(l.Holds), MaxListHolds)], l.SetKeys, l.Reserved)
		}
	}
	return b
}

// decodeBody appends entries as they are read (a count alone allocates
// nothing), so a lying count fails when the bytes run out.
func (a *ListPage) decodeBody(d *fsm.Decoder) {
	f := readFlags(d, "list flags", 4)
	a.More = f[0]
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
			l.Holds, l.SetKeys, l.Reserved = readExtras(d, MaxListHolds)
		}
		if l.Kind == lock.KindMutex && !l.Delayed {
			l.Holders = 1
		}
		if d.Err() == nil {
			a.Locks = append(a.Locks, l)
		}
	}
}

// Join (KindJoin; KindJoinEmpty when empty) asks the leader to add
// a server: see package cluster's addMember. The cluster ID travels only when the joining
// node knows one, so a request without it has the bytes of the builds
// before it; such a build (a leader from before the field) refuses the
// trailing bytes, and join asks it again without them.
type Join struct {
	ID, Addr  string
	Empty     bool   // the joining node's data dir held no raft state
	ClusterID string // the cluster its data dir belongs to; "" if none yet
}

func (r *Join) Kind() Kind {
	if r.Empty {
		return KindJoinEmpty
	}
	return KindJoin
}

func (r *Join) appendBody(b []byte) []byte {
	b = appendString(appendString(b, r.ID), r.Addr)
	if r.ClusterID != "" {
		b = appendString(b, r.ClusterID)
	}
	return b
}

func (r *Join) decodeBody(d *fsm.Decoder) {
	r.ID = d.String(MaxIDLen)
	r.Addr = d.String(MaxAddrLen)
	if d.More() {
		r.ClusterID = d.String(MaxIDLen)
		if d.Err() == nil && r.ClusterID == "" {
			d.Fail("empty cluster ID")
		}
	}
}

// Remove (KindRemove) asks the leader to remove a server (graceful
// leave): see package cluster's removeServer.
type Remove struct{ ID string }

func (r *Remove) Kind() Kind                 { return KindRemove }
func (r *Remove) appendBody(b []byte) []byte { return appendString(b, r.ID) }
func (r *Remove) decodeBody(d *fsm.Decoder)  { r.ID = d.String(MaxIDLen) }

// NoAnswer is the answer of kinds that answer only "done".
type NoAnswer struct{}

func (*NoAnswer) appendBody(b []byte) []byte { return b }
func (*NoAnswer) decodeBody(*fsm.Decoder)    {}

// Info (KindInfo) is both the question and its answer: a node's ID, the
// address of its API (may be empty), the command level its build reads
// (package cluster) and its raftlock version. The asking node tells its own, so
// one exchange informs both (package cluster). Any node answers.
//
// The level travels only when it is above fsm.BaselineLevel (a node that
// tells none reads the baseline) or when a version follows it, and the
// version only when there is one; so a message without them has the bytes
// of the builds before them. An answer carries a level only when the
// question had a level or a version, and a version only when the question
// had one, since an older build refuses trailing bytes (and a level at the
// baseline); the asker retries without the fields an older node refuses
// (package cluster's askInfo). A node at
// the baseline needs nobody's level: it proposes only baseline commands.
type Info struct {
	ID, APIAddr string
	Level       int    // 0 or fsm.BaselineLevel with no version: none told
	Version     string // "": none told
}

// maxVersionLen bounds a version in KindInfo: a module version, such as
// v1.2.3-rc.1+incompatible, is far shorter.
const maxVersionLen = 128

func (r *Info) Kind() Kind { return KindInfo }

// HasLevel says whether r tells a level above fsm.BaselineLevel.
func (r *Info) HasLevel() bool { return r.Level > fsm.BaselineLevel }

func (r *Info) appendBody(b []byte) []byte {
	b = appendString(appendString(b, r.ID), r.APIAddr)
	switch {
	case r.Version != "":
		b = binary.AppendUvarint(b, uint64(max(r.Level, fsm.BaselineLevel)))
		b = appendString(b, r.Version[:min(len(r.Version), maxVersionLen)])
	case r.HasLevel():
		b = binary.AppendUvarint(b, uint64(r.Level))
	}
	return b
}

func (r *Info) decodeBody(d *fsm.Decoder) {
	r.ID = d.String(MaxIDLen)
	r.APIAddr = d.String(MaxAddrLen)
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
	r.Level = int(l)
	if versioned {
		r.Version = d.String(maxVersionLen)
		if d.Err() == nil && r.Version == "" {
			d.Fail("empty version")
		}
	}
}

// Identity (KindIdentity) is both the question and its answer: a node's
// ID and its cluster's ID (empty if it knows none), asked by a node about to
// join through the one it asks (package cluster). Any node answers.
type Identity struct{ ID, ClusterID string }

func (r *Identity) Kind() Kind { return KindIdentity }
func (r *Identity) appendBody(b []byte) []byte {
	return appendString(appendString(b, r.ID), r.ClusterID)
}
func (r *Identity) decodeBody(d *fsm.Decoder) {
	r.ID = d.String(MaxIDLen)
	r.ClusterID = d.String(MaxIDLen)
}

// SessionRead (KindSessionRead) is a linearizable read of one session at
// the leader's log time; SessionResult is what it tells.
type SessionRead struct{ Session fsm.Owner }

type SessionResult struct {
	Live      bool
	TTL       time.Duration
	Remaining time.Duration // at the leader's log time when it answered
	LockDelay time.Duration
	Keys      int // keys the session holds or waits for
}

func (r *SessionRead) Kind() Kind                 { return KindSessionRead }
func (r *SessionRead) appendBody(b []byte) []byte { return append(b, r.Session[:]...) }
func (r *SessionRead) decodeBody(d *fsm.Decoder)  { copy(r.Session[:], d.Bytes(len(r.Session))) }

// ServerStatsRequest (KindServerStats) is the leader's question to a member
// for its ServerStats, carrying the leader's health report for it
// (package cluster). Any node answers; only a report from the leader it knows
// is believed.
type ServerStatsRequest struct {
	ID     string // the asking leader's
	Health HealthReport
}

// HealthReport is what the leader tells a member with each KindServerStats
// request: the cluster's failure tolerance, whether it judges that
// member healthy, and how it sees every member. known is false before the
// leader's first health check.
type HealthReport struct {
	Known         bool
	Healthy       bool
	Tolerance     int
	Voters        int
	HealthyVoters int
	// Members is the leader's view of each member of its configuration,
	// by ID, so that a node that does not lead shows it (package cluster).
	// It travels after the other fields, and only when Known and not
	// empty: a request without it has the bytes of the builds before it,
	// which refuse the trailing bytes (the leader then asks such a member
	// again without them: see package cluster's FetchServerStats).
	Members []MemberReport
}

// MemberReport is how the leader sees one member: Status is what its
// member source says (alive, failed, left; "" when it knows none), and
// Healthy how its reconciler last judged the member, once it has (Judged).
type MemberReport struct {
	ID      string
	Status  string
	Judged  bool
	Healthy bool
}

// MaxReportMembers bounds the members of one health report, and
// maxStatusLen a member's status in it (autopilot's words are short): so
// many of the longest entries stay well under transport.MaxFrameSize
// (TestFullHealthReportFitsAFrame).
const (
	MaxReportMembers = 4096
	maxStatusLen     = 32
)

func (r *ServerStatsRequest) Kind() Kind { return KindServerStats }

func (r *ServerStatsRequest) appendBody(b []byte) []byte {
	b = appendString(b, r.ID)
	b = appendFlags(b, r.Health.Known, r.Health.Healthy)
	b = binary.AppendUvarint(b, uint64(max(r.Health.Tolerance, 0)))
	b = binary.AppendUvarint(b, uint64(max(r.Health.Voters, 0)))
	b = binary.AppendUvarint(b, uint64(max(r.Health.HealthyVoters, 0)))
	if !r.Health.Known || len(r.Health.Members) == 0 {
		return b
	}
	members := r.Health.Members[:min(len(r.Health.Members), MaxReportMembers)]
	b = binary.AppendUvarint(b, uint64(len(members)))
	for _, m := range members {
		b = appendString(b, m.ID)
		b = appendString(b, m.Status[:min(len(m.Status), maxStatusLen)])
		b = appendFlags(b, m.Judged, m.Judged && m.Healthy)
	}
	return b
}

func (r *ServerStatsRequest) decodeBody(d *fsm.Decoder) {
	r.ID = d.String(MaxIDLen)
	flags := readFlags(d, "health flags", 2)
	r.Health.Known, r.Health.Healthy = flags[0], flags[1]
	r.Health.Tolerance = d.Count()
	r.Health.Voters = d.Count()
	r.Health.HealthyVoters = d.Count()
	if !d.More() {
		return
	}
	// One encoding per message: members only with a known health, and
	// never an empty list.
	n := d.Uvarint()
	if d.Err() == nil && (!r.Health.Known || n == 0 || n > MaxReportMembers) {
		d.Fail("report members out of range")
		return
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		m := MemberReport{ID: d.String(MaxIDLen), Status: d.String(maxStatusLen)}
		f := readFlags(d, "member health flags", 2)
		m.Judged, m.Healthy = f[0], f[1]
		if d.Err() == nil && (m.ID == "" || m.Healthy && !m.Judged) {
			d.Fail("report member")
		}
		if d.Err() == nil {
			r.Health.Members = append(r.Health.Members, m)
		}
	}
}

func (a *SessionResult) appendBody(b []byte) []byte {
	b = appendFlags(b, a.Live)
	b = binary.AppendVarint(b, int64(a.TTL))
	b = binary.AppendVarint(b, int64(a.Remaining))
	b = binary.AppendVarint(b, int64(a.LockDelay))
	return binary.AppendUvarint(b, uint64(max(a.Keys, 0)))
}

func (a *SessionResult) decodeBody(d *fsm.Decoder) {
	a.Live = readFlags(d, "session flags", 1)[0]
	a.TTL = time.Duration(d.Varint())
	a.Remaining = time.Duration(d.Varint())
	a.LockDelay = time.Duration(d.Varint())
	a.Keys = d.Count()
}

// ServerStats is what a member tells the leader about itself (KindServerStats).
type ServerStats struct {
	LastContact time.Duration // since it last heard from the leader; negative: never
	LastTerm    uint64        // term of its last log entry
	LastIndex   uint64        // index of its last log entry
}

func (a *ServerStats) appendBody(b []byte) []byte {
	b = binary.AppendVarint(b, int64(a.LastContact))
	b = binary.AppendUvarint(b, a.LastTerm)
	return binary.AppendUvarint(b, a.LastIndex)
}

func (a *ServerStats) decodeBody(d *fsm.Decoder) {
	a.LastContact = time.Duration(d.Varint())
	a.LastTerm = d.Uvarint()
	a.LastIndex = d.Uvarint()
}

// Group (KindGroup) is the commands of a CommandGroup; GroupAnswer
// holds one KindCommand reply per command, in order.
type Group struct{ Cmds []fsm.Command }

type GroupAnswer struct{ Replies []Reply }

// MaxGroupCommands bounds the commands of one KindGroup message (an HTTP
// batch's worth): so many of the largest commands a group carries (an
// acquire-all of fsm.MaxKeys keys of fsm.MaxKeyLen bytes, with
// fsm.MaxMetaLen of metadata) stay well under transport.MaxFrameSize
// (TestFullGroupFitsAFrame), so a group never needs a byte budget.
const MaxGroupCommands = 256

func (r *Group) Kind() Kind { return KindGroup }

func (r *Group) appendBody(b []byte) []byte {
	return appendGroupParts(b, len(r.Cmds), func(b []byte, i int) []byte {
		b, _ = r.Cmds[i].AppendBinary(b)
		return b
	})
}

func (r *Group) decodeBody(d *fsm.Decoder) {
	readGroupParts(d, "group command", func(n int) { r.Cmds = make([]fsm.Command, 0, n) }, func(part []byte) bool {
		sub := fsm.NewDecoder(part)
		c := sub.Command()
		r.Cmds = append(r.Cmds, c)
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

// readGroupParts reads what appendGroupParts wrote: 1 to MaxGroupCommands
// parts (sized is told how many), each handed to read, which says whether
// it was well formed.
func readGroupParts(d *fsm.Decoder, what string, sized func(n int), read func(part []byte) bool) {
	n := d.Count()
	if d.Err() == nil && (n < 1 || n > MaxGroupCommands) {
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

func (a *GroupAnswer) appendBody(b []byte) []byte {
	return appendGroupParts(b, len(a.Replies), func(b []byte, i int) []byte { return a.Replies[i].AppendBinary(b) })
}

func (a *GroupAnswer) decodeBody(d *fsm.Decoder) {
	readGroupParts(d, "group reply", func(n int) { a.Replies = make([]Reply, 0, n) }, func(part []byte) bool {
		r, err := DecodeReply(part)
		a.Replies = append(a.Replies, r)
		return err == nil && r.Kind == KindCommand
	})
}
