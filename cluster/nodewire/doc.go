// Package nodewire is the byte format of the node RPC, the messages raftlock
// nodes send each other: a follower forwards its callers' commands, reads
// and listings to the leader, a node asks to join or leave, and members tell
// each other who they are. Package cluster sends and serves them.
//
// Every message starts with Version; a
// node that reads another version answers CodeBadRequest, so a rolling
// upgrade that changes the format fails loudly instead of misreading.
//
//	request: version | kind | body
//	  KindCommand: the command's own fsm encoding (fsm.Command.AppendBinary)
//	  KindRead:    uvarint key length | key | 0, or 1 and a 16-byte owner
//	  KindJoin:    string id | string address    (string = uvarint length | bytes)
//	               [| string cluster ID: the joining node's, only when it knows one]
//	  KindJoinEmpty: as KindJoin
//	  KindRemove:  string id
//	  KindList:    string prefix | string after | uvarint limit (0: the leader's page size)
//	  KindInfo:    string id | string API address (the asking node's own, so one exchange informs both)
//	               [| uvarint command level: above fsm.BaselineLevel, or at it when a version follows
//	               [| string raftlock version: only when there is one]]
//	  KindWaitAcquire: an acquire (or acquire-all) with a wait, in the fsm encoding (as KindCommand)
//	  KindIdentity: string id | string cluster ID (the asking node's; empty if it knows none)
//	  KindSessionRead: 16-byte session ID
//	  KindServerStats: string id (the asking leader's) | health flags (1 known, 2 the asked node healthy) |
//	               uvarint failure tolerance | uvarint voters | uvarint healthy voters
//	               [| uvarint n (1..MaxReportMembers) | n × (string member id | string status |
//	               flags (1 judged, 2 healthy)): the leader's view of its members, only with a known
//	               health, and only to a member that reads it (a build before it refuses it)]
//	  KindGroup:   uvarint n (1..MaxGroupCommands) | n × (uvarint length | a command in its fsm encoding,
//	               as KindCommand: an acquire without wait, an acquire-all without wait, a release, an extend)
//	reply: version | code | kind | body
//	  CodeOK, KindCommand: status | uvarint token | varint expiresAt | varint now | uvarint waiters
//	                       [| kind | uvarint limit: status kind-mismatch only, what the key is]
//	  CodeOK, KindRead:    flags (1 held, 2 held by the asking owner, 4 metadata follows, 8 lock-delay,
//	                       16 kind follows, 32 extras follow) | uvarint token | varint remaining | uvarint waiters
//	                       [| string metadata] [| kind | uvarint limit | uvarint holders | flags (1 shared)]
//	                       [| extras]
//	  CodeOK, KindWaitAcquire: status | uvarint token | varint remaining | uvarint waiters | varint ttl
//	                       [| kind | uvarint limit: status kind-mismatch only];
//	                       remaining counts from when the request reached the leader
//	  CodeOK, KindJoin/KindJoinEmpty/KindRemove: empty
//	  CodeOK, KindInfo:    string id | string API address (may be empty)
//	                       [| uvarint command level: as in a request, and only if the request had a level or a version
//	                       [| string raftlock version: only if the request had one]]
//	  CodeOK, KindIdentity: string id | string cluster ID (may be empty)
//	  CodeOK, KindSessionRead: flags (1 live) | varint ttl | varint remaining | varint lockDelay | uvarint keys
//	  CodeOK, KindServerStats: varint last contact (ns; negative: never) | uvarint last log term | uvarint last log index
//	  CodeOK, KindGroup:   uvarint n | n × (uvarint length | a whole KindCommand reply, version byte included):
//	                       the commands' replies in the request's order
//	  CodeOK, KindList:    flags (1 more keys follow, 2 entries carry metadata, 4 entries carry kinds) |
//	                       uvarint count | count × (string key | uvarint token | varint remaining |
//	                       uvarint waiters [| string metadata | flags (1 lock-delay)]
//	                       [| kind | uvarint limit | uvarint holders | flags (1 shared)] [| extras])
//	               (list flags 8: entries carry extras)
//	  extras: uvarint n | n × (uvarint token | varint remaining | string metadata | flags (1 shared, 2 lock-delay))
//	          | uvarint m | m × string set key | flags (1 reserved)
//	          the holds of a semaphore or read/write key in grant order (at most MaxReadHolds in a
//	          read, MaxListHolds per key in a list: holders counts them all), the keys of the
//	          holder's multi-key grant, and whether a free key is kept for a multi-key waiter
//	  CodeNotLeader: string leader address (may be empty)
//	  other codes: string message (CodeWrongCluster answers KindJoin and KindJoinEmpty only)
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
// A multi-key acquire (fsm op 13, acquire-all) travels in KindCommand and
// KindWaitAcquire like any acquire, in its fsm encoding, and is answered
// in the same replies (for a kind-mismatch, waiters is the 1-based place of
// the key of another kind in the set); a leader too old to know op 13
// fails to decode it and answers CodeBadRequest.
//
// Each kind is one request type with one answer type, and one line of
// the kinds table, which is all the encoding and decoding code knows of it
// (but CommandAnswer.AppendReply, a command's reply written through the
// same functions without a Reply, for the leader's busiest path).
// To add a kind: give it the next unused number below; write its request
// type (appendBody, decodeBody: see Request) and its answer type
// (appendBody, decodeBody: see Answer; NoAnswer when it answers nothing);
// add its line to kinds; describe its bytes above; then serve it in
// package cluster.
//
// New request kinds are added without a new version: a node that does not
// know a kind answers CodeBadRequest ("bad request kind"), which the asking
// node reports as ErrBadRequest, and the kinds it knows keep working. So a
// cluster upgraded one node at a time serves every older kind throughout;
// KindList (added after the first release) works once the leader has it.
// Kind 6 (an await of a follower's own waiter, retired when waiting moved
// to the leader) is never reused; KindWaitAcquire needs a leader that
// knows it; a member too old to answer KindIdentity is joined through
// without the cluster check.
package nodewire
