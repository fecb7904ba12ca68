package fsm

import (
	"bytes"
	"testing"
	"testing/iotest"
)

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range validCommands {
		b, err := c.AppendBinary(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{encodingVersion, byte(OpTick), 0x80, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := DecodeCommand(in)
		if err != nil {
			return
		}
		if verr := c.Validate(); verr != nil {
			t.Fatalf("decoded an invalid command %+v: %v", c, verr)
		}
		out, err := c.AppendBinary(nil)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", c, err)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("round trip changed the bytes:\n in %x\nout %x", in, out)
		}
		// Applying whatever decodes never panics and never answers invalid.
		if r := New(nil).Apply(c); r.Status == StatusInvalid {
			t.Fatalf("decoded command %+v applied as invalid", c)
		}
	})
}

func FuzzDecodeBatch(f *testing.F) {
	for _, cmds := range [][]Command{nil, validCommands[:2], validCommands} {
		b, err := AppendBatch(nil, cmds)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{encodingVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, in []byte) {
		cmds, err := DecodeBatch(in)
		if err != nil {
			return
		}
		out, err := AppendBatch(nil, cmds)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", cmds, err)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("round trip changed the bytes:\n in %x\nout %x", in, out)
		}
	})
}

func FuzzRestore(f *testing.F) {
	f.Add(New(nil).Snapshot())
	seed := New(nil)
	for _, c := range newCommandLog(7).take(200) {
		seed.Apply(c)
	}
	f.Add(seed.Snapshot())
	multi, log := New(nil), newMultiLog(7)
	for range 300 {
		multi.Apply(log.next())
	}
	f.Add(multi.Snapshot())
	f.Add([]byte(header(1).lease("k", ownerA, 1, 200)))
	f.Add(sessionMachine(f).Snapshot())
	f.Add(groupMachine(f).Snapshot())
	f.Add(multiMachine(f).Snapshot())
	f.Add(latestMachine(f).Snapshot())
	smallWindow(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		m := New(nil)
		m.Apply(acquire(1, "before", ownerA, MaxTTL, 0))
		before := m.Snapshot()
		err := m.Restore(in)
		// Read from a stream through a window smaller than many inputs,
		// the same bytes restore the same state or are refused alike.
		streamed := New(nil)
		if serr := streamed.RestoreFrom(iotest.HalfReader(bytes.NewReader(in)), int64(len(in))); (serr == nil) != (err == nil) {
			t.Fatalf("Restore: %v, RestoreFrom: %v", err, serr)
		} else if err == nil && !bytes.Equal(m.Snapshot(), streamed.Snapshot()) {
			t.Fatalf("RestoreFrom restored another state")
		}
		if err != nil {
			if !bytes.Equal(before, m.Snapshot()) {
				t.Fatalf("failed restore changed the state")
			}
			return
		}
		out := m.Snapshot()
		if len(in) > 0 && in[0] != snapshotVersion {
			// An old snapshot comes back in the current format, which
			// must then round-trip.
			in = out
			m2 := New(nil)
			if err := m2.Restore(in); err != nil {
				t.Fatalf("a version %d snapshot restored, but its current form does not: %v", in[0], err)
			}
			out = m2.Snapshot()
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("restore then snapshot changed the bytes:\n in %x\nout %x", in, out)
		}
		if err := checkInternals(m); err != nil {
			t.Fatalf("restored machine broken: %v", err)
		}
		// The restored machine keeps working.
		next, ok := m.NextDeadline()
		if ok {
			m.Apply(tick(next))
			if err := checkInternals(m); err != nil {
				t.Fatalf("after a tick: %v", err)
			}
		}
	})
}
