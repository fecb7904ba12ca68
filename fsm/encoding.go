package fsm

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Wire format, version 1. All integers are unsigned LEB128 varints in their
// shortest form (a longer form is rejected, so every command has exactly one
// encoding and decode followed by encode gives back the same bytes).
//
//	command := version op body
//	batch   := version count body*      (each body preceded by its op)
//	body    := acquire: stamp key owner ttl wait
//	           acquire with a session or metadata (op byte 11):
//	             stamp key owner ttl wait session meta
//	           acquire of a semaphore or read/write key (op byte 12):
//	             stamp key owner ttl wait session meta kind limit shared
//	           release, cancel-wait: stamp key owner
//	           extend: stamp key owner ttl
//	           tick, new-term, drop-unclaimed: stamp
//	           session-create: stamp session ttl lockDelay
//	           session-renew, session-destroy: stamp session
//	           force-release: stamp key
//	           acquire-all (op 13): stamp owner ttl wait meta count key*
//	key     := length bytes
//	owner, session := 16 bytes
//	meta    := length bytes
//
// Durations are nanoseconds. An op's layout has no room for the fields it
// does not use, and every field is checked against the limits of Validate.
// An acquire without session and metadata has only the op-1 form (op 11
// with a zero session and no metadata is rejected), so that each command
// still has one encoding and logs written before sessions read the same.
// Likewise op 12 is only for a kind other than the mutex (kind is 1 or 2,
// limit a varint, 0 unless a semaphore, shared one byte, 0 or 1, 1 only for
// a read/write key), and ops 1 and 11 always mean a mutex. An
// acquire-all's count is 1..MaxKeys and its keys are strictly ascending,
// so a set has one encoding.
const encodingVersion = 1

// minBodyLen is the shortest encoded command without version: a tick at stamp
// zero (op byte plus one varint byte). It bounds the count of a batch.
const minBodyLen = 2

// AppendBinary appends the command's versioned binary encoding to b. An
// invalid command (see Validate) is not encoded: b is returned unchanged with
// the validation error.
func (c Command) AppendBinary(b []byte) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return b, err
	}
	b = append(b, encodingVersion)
	return c.appendBody(b), nil
}

// appendBody encodes a valid command without the version byte.
func (c Command) appendBody(b []byte) []byte {
	kinded := c.Op == OpAcquire && c.Kind != KindMutex
	extended := c.Op == OpAcquire && (!c.Session.IsZero() || c.Meta != "") || kinded
	switch {
	case kinded:
		b = append(b, wireAcquireKind)
	case extended:
		b = append(b, wireAcquireExtended)
	default:
		b = append(b, byte(c.Op))
	}
	b = appendUvarint(b, uint64(c.Stamp))
	switch c.Op {
	case OpTick, OpNewTerm, OpDropUnclaimed:
		return b
	case OpAcquireAll:
		b = append(b, c.Owner[:]...)
		b = appendUvarint(b, uint64(c.TTL))
		b = appendUvarint(b, uint64(c.Wait))
		b = appendMeta(b, c.Meta)
		b = appendUvarint(b, uint64(len(c.Keys)))
		for _, k := range c.Keys {
			b = appendUvarint(b, uint64(len(k)))
			b = append(b, k...)
		}
		return b
	case OpSessionCreate:
		b = append(b, c.Session[:]...)
		b = appendUvarint(b, uint64(c.TTL))
		return appendUvarint(b, uint64(c.LockDelay))
	case OpSessionRenew, OpSessionDestroy:
		return append(b, c.Session[:]...)
	}
	b = appendUvarint(b, uint64(len(c.Key)))
	b = append(b, c.Key...)
	if c.Op == OpForceRelease {
		return b
	}
	b = append(b, c.Owner[:]...)
	switch c.Op {
	case OpAcquire:
		b = appendUvarint(b, uint64(c.TTL))
		b = appendUvarint(b, uint64(c.Wait))
		if extended {
			b = append(b, c.Session[:]...)
			b = appendMeta(b, c.Meta)
		}
		if kinded {
			b = append(b, byte(c.Kind))
			b = appendUvarint(b, uint64(c.Limit))
			b = appendFlag(b, c.Shared)
		}
	case OpExtend:
		b = appendUvarint(b, uint64(c.TTL))
	}
	return b
}

// DecodeCommand decodes one command. Bad bytes give an error wrapping
// ErrBadEncoding or ErrBadVersion (and the validation sentinel, when a field
// is out of its limits), never a panic.
func DecodeCommand(b []byte) (Command, error) {
	d := decoder{b: b}
	d.version()
	c := d.command()
	d.end()
	if d.err != nil {
		return Command{}, d.err
	}
	return c, nil
}

// AppendBatch appends the versioned encoding of several commands (one raft
// entry). If any command is invalid, b is returned unchanged with an error
// naming the command's index.
func AppendBatch(b []byte, cmds []Command) ([]byte, error) {
	for i := range cmds {
		if err := cmds[i].Validate(); err != nil {
			return b, fmt.Errorf("command %d: %w", i, err)
		}
	}
	b = append(b, encodingVersion)
	b = appendUvarint(b, uint64(len(cmds)))
	for i := range cmds {
		b = cmds[i].appendBody(b)
	}
	return b, nil
}

// DecodeBatch decodes what AppendBatch wrote. The whole batch is rejected if
// any part of it is malformed.
func DecodeBatch(b []byte) ([]Command, error) {
	d := decoder{b: b}
	d.version()
	n := d.uvarint()
	// Every command takes at least minBodyLen bytes, so the count is bounded
	// by the input before anything is allocated from it.
	if d.err == nil && n > uint64(len(d.b)-d.off)/minBodyLen {
		d.fail("batch count exceeds its bytes")
	}
	if d.err != nil {
		return nil, d.err
	}
	cmds := make([]Command, n)
	for i := range cmds {
		cmds[i] = d.command()
		if d.err != nil {
			return nil, fmt.Errorf("command %d: %w", i, d.err)
		}
	}
	d.end()
	if d.err != nil {
		return nil, d.err
	}
	return cmds, nil
}

// decoder reads the wire format. The first error sticks; later reads return
// zero values so callers check once.
type decoder struct {
	b    []byte
	off  int
	err  error
	base int64 // bytes of the message before b: a restore's window (restoreWindow) has slid past them
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at byte %d", ErrBadEncoding, what, d.base+int64(d.off))
	}
}

func (d *decoder) failLimit(field string, err error) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %w", ErrBadEncoding, field, err)
	}
}

func (d *decoder) version() {
	v := d.byte()
	if d.err == nil && v != encodingVersion {
		d.err = fmt.Errorf("%w: %d", ErrBadVersion, v)
	}
}

func (d *decoder) end() {
	if d.err == nil && d.off != len(d.b) {
		d.fail("trailing bytes")
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated")
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

// uvarint reads a shortest-form LEB128 varint of at most 64 bits.
func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	var x uint64
	for i := 0; i < 10; i++ {
		if d.off >= len(d.b) {
			d.fail("truncated varint")
			return 0
		}
		c := d.b[d.off]
		d.off++
		if i == 9 && c > 1 {
			d.fail("varint overflows 64 bits")
			return 0
		}
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				d.fail("varint not in shortest form")
				return 0
			}
			return x
		}
	}
	d.fail("varint too long")
	return 0
}

// duration reads a non-negative duration no larger than limit.
func (d *decoder) duration(field string, limit time.Duration, limitErr error) time.Duration {
	v := d.uvarint()
	if d.err == nil && v > uint64(limit) {
		d.failLimit(field, limitErr)
		return 0
	}
	return time.Duration(v)
}

func (d *decoder) key() string { return string(d.keyBytes()) }

// keyBytes reads a key as key does, without copying it out of the input.
func (d *decoder) keyBytes() []byte {
	k := d.textBytes("key", MaxKeyLen, ErrKeyTooLong)
	if d.err == nil && len(k) == 0 {
		d.failLimit("key", ErrEmptyKey)
	}
	return k
}

// text reads a length-prefixed string of at most limit bytes: field names
// it in errors, tooLong is the error for a longer one.
func (d *decoder) text(field string, limit int, tooLong error) string {
	return string(d.textBytes(field, limit, tooLong))
}

// textBytes reads what text reads, still in the input.
func (d *decoder) textBytes(field string, limit int, tooLong error) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	switch {
	case n > uint64(limit):
		d.failLimit(field, tooLong)
		return nil
	case n > uint64(len(d.b)-d.off):
		d.fail("truncated " + field)
		return nil
	}
	b := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return b
}

// session reads a session ID, which like an owner is never zero.
func (d *decoder) session() Owner { return d.nonZeroOwner("session", ErrZeroSession) }

// rawOwner reads 16 bytes that may be zero.
func (d *decoder) rawOwner() Owner {
	var o Owner
	if d.err != nil {
		return o
	}
	if len(d.b)-d.off < len(o) {
		d.fail("truncated owner")
		return o
	}
	copy(o[:], d.b[d.off:])
	d.off += len(o)
	return o
}

// owner reads an owner, which is never zero.
func (d *decoder) owner() Owner { return d.nonZeroOwner("owner", ErrZeroOwner) }

// nonZeroOwner reads 16 bytes that must not be all zero: field names them
// in errors, zero is the error for zeros.
func (d *decoder) nonZeroOwner(field string, zero error) Owner {
	o := d.rawOwner()
	if d.err == nil && o.IsZero() {
		d.failLimit(field, zero)
	}
	return o
}

// command reads one op and its body.
func (d *decoder) command() Command {
	var c Command
	op := d.byte()
	if d.err != nil {
		return Command{}
	}
	kinded := op == wireAcquireKind
	extended := op == wireAcquireExtended || kinded
	c.Op = Op(op)
	if extended {
		c.Op = OpAcquire
	}
	switch c.Op {
	case OpAcquire, OpRelease, OpExtend, OpCancelWait, OpTick, OpNewTerm, OpDropUnclaimed,
		OpSessionCreate, OpSessionRenew, OpSessionDestroy, OpForceRelease, OpAcquireAll:
	default:
		d.failLimit("op "+c.Op.String(), ErrUnknownOp)
		return Command{}
	}
	c.Stamp = d.duration("stamp", MaxStamp, ErrStampRange)
	switch c.Op {
	case OpTick, OpNewTerm, OpDropUnclaimed:
	case OpSessionCreate:
		c.Session = d.session()
		c.TTL = d.duration("ttl", MaxTTL, ErrTTLRange)
		c.LockDelay = d.duration("lock delay", MaxLockDelay, ErrDelayRange)
	case OpSessionRenew, OpSessionDestroy:
		c.Session = d.session()
	case OpAcquireAll:
		c.Owner = d.owner()
		c.TTL = d.duration("ttl", MaxTTL, ErrTTLRange)
		c.Wait = d.duration("wait", MaxWait, ErrWaitRange)
		c.Meta = d.meta()
		n := d.uvarint()
		if d.err == nil && (n == 0 || n > MaxKeys) {
			d.failLimit("keys", ErrKeyCount)
		}
		if d.err == nil {
			c.Keys = make([]string, 0, n)
			for i := uint64(0); i < n && d.err == nil; i++ {
				c.Keys = append(c.Keys, d.key())
			}
		}
	default:
		c.Key = d.key()
		if c.Op != OpForceRelease {
			c.Owner = d.owner()
		}
	}
	switch c.Op {
	case OpAcquire:
		c.TTL = d.duration("ttl", MaxTTL, ErrTTLRange)
		c.Wait = d.duration("wait", MaxWait, ErrWaitRange)
		if extended {
			c.Session = d.rawOwner()
			c.Meta = d.meta()
			if d.err == nil && !kinded && c.Session.IsZero() && c.Meta == "" {
				d.fail("op 11 acquire with neither session nor metadata")
			}
		}
		if kinded {
			c.Kind = Kind(d.byte())
			if d.err == nil && c.Kind == KindMutex {
				d.fail("op 12 acquire of a mutex")
			}
			if limit := d.uvarint(); d.err == nil && limit > MaxHolders {
				d.failLimit("limit", ErrLimitRange)
			} else {
				c.Limit = int(limit)
			}
			switch d.byte() {
			case 0:
			case 1:
				c.Shared = true
			default:
				d.fail("shared flag not 0 or 1")
			}
		}
	case OpExtend:
		c.TTL = d.duration("ttl", MaxTTL, ErrTTLRange)
	}
	if d.err != nil {
		return Command{}
	}
	// The layout already excludes unused fields; Validate adds the lower
	// bounds (a TTL under MinTTL).
	if err := c.Validate(); err != nil {
		d.failLimit(c.Op.String(), err)
		return Command{}
	}
	return c
}

// appendUvarint is binary.AppendUvarint: the shortest-form LEB128 varint
// uvarint reads.
func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// uvarintLen is the length of appendUvarint's encoding of v.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
