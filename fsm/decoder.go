package fsm

import "fmt"

// Decoder reads a binary message front to back. It is the one reader of this
// package's encodings (commands, batches, snapshots) and of the messages
// other packages build from them (the cluster's forwarding RPC), so every
// format checks lengths, varints and trailing bytes the same way.
//
// The first problem sticks: Err reports it, wrapping ErrBadEncoding (or
// ErrBadVersion for a command of another version), and
// every later read returns a zero value, so a caller reads a whole message
// and checks once. Integers are LEB128 varints as encoding/binary's
// AppendUvarint and AppendVarint write them, in their shortest form only
// (another form is refused, so a message has one encoding). A Decoder never
// panics, and never allocates more than the bytes it was given justify.
type Decoder struct{ d decoder }

// NewDecoder returns a Decoder reading b. It does not copy b; strings it
// returns are copies, byte slices are not.
func NewDecoder(b []byte) *Decoder { return &Decoder{d: decoder{b: b}} }

// Err is the first problem met, or nil.
func (d *Decoder) Err() error { return d.d.err }

// Fail records a problem found by the caller (a value out of its range),
// unless one is recorded already; what says what was wrong.
func (d *Decoder) Fail(what string) { d.d.fail(what) }

// End records trailing bytes as a problem, and returns Err.
func (d *Decoder) End() error {
	d.d.end()
	return d.d.err
}

// More reports whether bytes are left to read (and no problem was met):
// for a message whose last field is optional.
func (d *Decoder) More() bool { return d.d.err == nil && d.d.off < len(d.d.b) }

// Byte reads one byte.
func (d *Decoder) Byte() byte { return d.d.byte() }

// Bytes reads n bytes: a slice of the input, not a copy.
func (d *Decoder) Bytes(n int) []byte { return d.d.bytes(n) }

// Uvarint reads an unsigned varint of at most 64 bits.
func (d *Decoder) Uvarint() uint64 { return d.d.uvarint() }

// Varint reads a signed (zig-zag) varint, as binary.AppendVarint writes it.
func (d *Decoder) Varint() int64 {
	u := d.d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// Count reads an unsigned varint that counts something held in memory (a
// queue's length): at most 1<<31.
func (d *Decoder) Count() int {
	v := d.d.uvarint()
	if v > 1<<31 {
		d.d.fail("count too large")
		return 0
	}
	return int(v)
}

// String reads a varint length and that many bytes, refusing a length over
// limit.
func (d *Decoder) String(limit int) string {
	n := d.d.uvarint()
	if d.d.err == nil && n > uint64(limit) {
		d.d.fail(fmt.Sprintf("string of %d bytes (limit %d)", n, limit))
		return ""
	}
	return string(d.d.bytes(int(n)))
}

// Command reads a command with its version byte, as Command.AppendBinary
// wrote it; a command out of its limits is refused as DecodeCommand refuses
// it.
func (d *Decoder) Command() Command {
	d.d.version()
	return d.d.command()
}

// bytes reads n bytes: a slice of the input.
func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b)-d.off {
		d.fail("truncated")
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}
