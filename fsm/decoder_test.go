package fsm

import (
	"encoding/binary"
	"math"
	"testing"
)

// Decoder reads what encoding/binary writes, sticks to the first problem,
// and refuses what has another encoding or breaks a limit.
func TestDecoderReadsWhatBinaryWrites(t *testing.T) {
	var b []byte
	ints := []int64{0, -1, 1, 63, -64, 64, math.MaxInt64, math.MinInt64}
	for _, v := range ints {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, math.MaxUint64)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	b = append(b, 7)
	d := NewDecoder(b)
	for _, v := range ints {
		if got := d.Varint(); got != v {
			t.Errorf("Varint: got %d, want %d", got, v)
		}
	}
	if got := d.Uvarint(); got != math.MaxUint64 {
		t.Errorf("Uvarint: got %d", got)
	}
	if got := d.String(3); got != "abc" {
		t.Errorf("String: got %q", got)
	}
	if got := d.Byte(); got != 7 {
		t.Errorf("Byte: got %d", got)
	}
	if err := d.End(); err != nil {
		t.Fatal(err)
	}

	for name, tc := range map[string]struct {
		b    []byte
		read func(d *Decoder)
	}{
		"string over its limit": {[]byte{4, 'a', 'b', 'c', 'd'}, func(d *Decoder) { d.String(3) }},
		"truncated string":      {[]byte{3, 'a'}, func(d *Decoder) { d.String(3) }},
		"varint not shortest":   {[]byte{0x81, 0x00}, func(d *Decoder) { d.Varint() }},
		"count too large":       {binary.AppendUvarint(nil, 1<<31+1), func(d *Decoder) { d.Count() }},
		"trailing bytes":        {[]byte{1, 2}, func(d *Decoder) { d.Byte() }},
		"bytes past the end":    {[]byte{1, 2}, func(d *Decoder) { d.Bytes(3) }},
		"failed by the caller":  {[]byte{9}, func(d *Decoder) { d.Byte(); d.Fail("flag") }},
		"command of no version": {[]byte{}, func(d *Decoder) { d.Command() }},
		"reads after a problem": {[]byte{}, func(d *Decoder) { d.Byte(); d.Byte() }},
	} {
		d := NewDecoder(tc.b)
		tc.read(d)
		if d.End() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
