package fsm

import (
	"fmt"
	"hash/maphash"
	"iter"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The index answers as a map would through random adds and removes, with
// few keys (many collisions and wrap-arounds at the end of the slots) and
// with many (growth).
func TestKeyIndexAgreesWithMap(t *testing.T) {
	for _, keys := range []int{5, 40, 3000} {
		t.Run(fmt.Sprint(keys), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(keys), 1))
			var x keyIndex
			if keys > 1000 {
				x = newKeyIndex(keys / 2)
			}
			want := make(map[string]*entry)
			for range 20 * keys {
				k := fmt.Sprint("k", rng.IntN(keys))
				if e := want[k]; e != nil {
					require.Same(t, e, x.get(k), k)
					x.remove(k)
					delete(want, k)
					require.Nil(t, x.get(k), k)
				} else {
					require.Nil(t, x.get(k), k)
					e := newEntry(k)
					x.add(e)
					want[k] = e
				}
				require.Equal(t, len(want), x.len())
				if rng.IntN(keys) == 0 {
					for k, e := range want {
						require.Same(t, e, x.get(k), k)
					}
				}
			}
			x.remove("absent")
			require.Equal(t, len(want), x.len())
		})
	}
}

// all lists the index's keys and entries, in no order: for the tests'
// checks of the whole machine.
func (x *keyIndex) all() iter.Seq2[string, *entry] {
	return func(yield func(string, *entry) bool) {
		for _, t := range []*slotTable{&x.cur, &x.old} {
			for gi := range t.groups {
				for _, e := range t.groups[gi].slots {
					if e != nil && !yield(e.key(), e) {
						return
					}
				}
			}
		}
	}
}

// entries lists the index's entries, in no order.
func (x *keyIndex) entries() []*entry {
	var es []*entry
	for _, e := range x.all() {
		es = append(es, e)
	}
	return es
}

// Growing moves the entries into the bigger table a few at each change,
// not all in the command that grows it: at millions of keys that one
// command held up every member for seconds. Every key stays found
// throughout, and through removals while the move is under way.
func TestKeyIndexGrowsAFewSlotsAtATime(t *testing.T) {
	var x keyIndex
	var es []*entry
	grows := 0
	for i := range 50_000 {
		before := x.cur.slots()
		e := newEntry(lockKey(i))
		x.add(e)
		es = append(es, e)
		if x.cur.slots() != before && before > 0 {
			grows++
			inCur := 0
			for gi := range x.cur.groups {
				for _, s := range x.cur.groups[gi].slots {
					if s != nil {
						inCur++
					}
				}
			}
			if inCur > 16+1 { // a few slots' entries and the new one: not the table

				t.Fatalf("growing to %d slots at key %d placed %d entries at once", x.cur.slots(), i, inCur)
			}
		}
		if i%7 == 3 { // remove an earlier key now and then, wherever it is
			gone := es[i/2]
			if gone != nil {
				x.remove(gone.key())
				es[i/2] = nil
				if x.get(gone.key()) != nil {
					t.Fatalf("%s still found after its removal", gone.key())
				}
			}
		}
		if i%997 == 0 {
			for _, e := range es {
				if e != nil && x.get(e.key()) != e {
					t.Fatalf("after %d adds, %s is not found", i+1, e.key())
				}
			}
		}
	}
	n := 0
	for _, e := range es {
		if e != nil {
			n++
			if x.get(e.key()) != e {
				t.Fatalf("%s is not found", e.key())
			}
		}
	}
	if x.len() != n || grows < 10 {
		t.Fatalf("len %d, want %d; %d grows", x.len(), n, grows)
	}
}

// A run of full slots that wraps past the old table's end is still found
// while the move empties the table's first slots: keys placed after the
// wrap are reached from their own slot at the table's end.
func TestKeyIndexFindsWrappedRunsWhileGrowing(t *testing.T) {
	x := newKeyIndex(48) // 64 slots, full at 48 keys
	last := uint64(x.cur.slots() - 1)
	var wrapped, others []*entry
	for i := 0; len(wrapped) < 14 || len(others) < 34; i++ {
		e := newEntry(lockKey(i))
		h, _ := x.hash(e.key())
		switch {
		case h&last == last && len(wrapped) < 14:
			wrapped = append(wrapped, e)
		case h&last != last && h&last > 20 && len(others) < 34:
			others = append(others, e) // away from the wrapped run's slots
		}
	}
	all := append(append([]*entry{}, wrapped...), others...)
	for _, e := range all {
		x.add(e)
	}
	for i := 0; i < 40; i++ { // grow, then move old a step at a time
		e := newEntry(fmt.Sprintf("more-%d", i))
		x.add(e)
		all = append(all, e)
		for _, e := range all {
			if x.get(e.key()) != e {
				t.Fatalf("after %d adds past growing (moved %d of old's slots), %s is not found", i+1, x.moved, e.key())
			}
		}
	}
	for _, e := range wrapped { // and removed from wherever they are
		x.remove(e.key())
		if x.get(e.key()) != nil {
			t.Fatalf("%s still found after its removal", e.key())
		}
		for _, o := range others {
			if x.get(o.key()) != o {
				t.Fatalf("%s lost after removing %s", o.key(), e.key())
			}
		}
	}
}

// FuzzKeyIndex checks the index against a map through a sequence of adds,
// batch adds, removes and lookups that the input decodes to, from a tiny
// index (it grows several times, and removals land while a move is under
// way) or one sized ahead. The input chooses each key's own slot (its hash's
// low seven bits, all of them a table of up to 128 slots uses), so that it
// can pile keys into one run, or make a run wrap past the table's end; the
// index's random seed then changes nothing but the tags.
//
// The first byte chooses the index: zero for an empty one, else one sized
// for up to 96 keys. Then each operation is a byte, its top two bits the
// kind (add; remove; remove and add again, or for a key not in the index a
// batch add; lookup) and the rest a key (of 64), and for a key not seen
// before a byte for its slot; a batch add has a byte more for how many keys
// (the key and the ones after it not in the index).
func FuzzKeyIndex(f *testing.F) {
	f.Add([]byte{0})
	// A batch of 16 keys into an empty index: added one at a time, growing.
	f.Add([]byte{0, 128, 3, 15})
	// Nine keys piled onto slot 7, a run that wraps past the end of the
	// first table (8 slots), then removals and adds after it has grown.
	f.Add([]byte{0, 0, 7, 1, 7, 2, 7, 3, 7, 4, 7, 5, 7, 6, 7, 7, 7, 8, 7, 9, 1, 64, 65, 66, 10, 1, 11, 2, 12, 3, 67, 68, 69})
	// Twelve keys piled onto slot 5 and twelve more after them, so that
	// the growth at the 25th key moves the pile's first slots and leaves
	// the rest of it in the old table, then looked up and removed.
	pile := []byte{0}
	for k := range byte(25) {
		slot := k + 6
		if k < 12 {
			slot = 5
		}
		pile = append(pile, k, slot)
	}
	for k := range byte(12) {
		pile = append(pile, 192|k)
	}
	for k := range byte(12) {
		pile = append(pile, 64|(11-k))
	}
	f.Add(pile)
	// The same with the pile on slot 30, its run wrapping past the end of
	// the old table of 32 slots.
	wrap := slices.Clone(pile)
	for k := range 12 {
		wrap[2+2*k] = 30
	}
	f.Add(wrap)
	// Keys added until the index has grown to 128 slots, and just after
	// each growth three removed (while the move is under way) and added
	// again.
	grow := []byte{0}
	for k := range byte(64) {
		grow = append(grow, k, k*37)
		if k == 6 || k == 12 || k == 24 || k == 48 {
			grow = append(grow, 64|(k-1), 64|(k-3), 64|(k-5), k-1, k-3, k-5)
		}
	}
	f.Add(grow)
	// Into an index sized for 40 keys (64 slots), a batch of five keys,
	// removals, then a batch of 16 keys piled onto slot 62, a run that
	// wraps past the end over the first batch's, and removals in it.
	sized := []byte{40, 128 | 5, 127, 4, 1, 2, 3, 4, 64 | 6, 64 | 5, 192 | 7, 128 | 30, 126, 15}
	for range 15 {
		sized = append(sized, 126)
	}
	f.Add(append(sized, 64|31, 64|30, 192|32, 64|8, 192|45, 192|9))
	// Into an index sized for 90 keys (128 slots), 20 keys piled onto slot
	// 120, a run that wraps past the end, then each removed and added
	// again, then removed.
	end := []byte{90}
	for k := range byte(20) {
		end = append(end, k, 120)
	}
	for k := range byte(20) {
		end = append(end, 128|k)
	}
	for k := range byte(20) {
		end = append(end, 64|k)
	}
	f.Add(end)
	// One seed for every input, so that an input does the same each time
	// it runs (the fuzzer tells inputs apart by what code they reach, tag
	// matches included) and each key is looked for once.
	seed := maphash.MakeSeed()
	var keysWithSlot [64][128]string
	// Four batches of 16 keys into an index sized for 40 (64 slots, room
	// for 48): the last one grows it.
	full := []byte{40}
	for k := range byte(64) {
		if k%16 == 0 {
			full = append(full, 128|k, k*5, 15)
		} else {
			full = append(full, k*5)
		}
	}
	f.Add(full)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		var x keyIndex
		if in[0] != 0 {
			x = newKeyIndex(int(in[0]) % 97)
		}
		x.seed = seed
		in = in[1:]
		next := func() byte {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return b
		}
		var keys [64]string
		keyOf := func(k int) string {
			if keys[k] == "" {
				slot := next() & 127
				if keysWithSlot[k][slot] == "" {
					keysWithSlot[k][slot] = keyWithSlot(&x, k, uint64(slot))
				}
				keys[k] = keysWithSlot[k][slot]
			}
			return keys[k]
		}
		want := make(map[string]*entry)
		check := func(key string) {
			t.Helper()
			if got := x.get(key); got != want[key] {
				t.Fatalf("get(%q) = %p, want %p", key, got, want[key])
			}
		}
		checkAll := func() {
			t.Helper()
			for _, key := range keys {
				if key != "" {
					check(key)
				}
			}
			n := 0
			for key, e := range x.all() {
				if want[key] != e {
					t.Fatalf("the index holds %q's entry %p, want %p", key, e, want[key])
				}
				n++
			}
			if n != len(want) {
				t.Fatalf("the index holds %d entries, want %d", n, len(want))
			}
		}
		for op := 0; len(in) > 0; op++ {
			b := next()
			k := int(b & 63)
			key := keyOf(k)
			switch b >> 6 {
			case 0:
				if want[key] == nil {
					e := newEntry(key)
					x.add(e)
					want[key] = e
				}
			case 1:
				x.remove(key)
				delete(want, key)
			case 2:
				if want[key] != nil { // in again, where it lands now
					x.remove(key)
					e := newEntry(key)
					x.add(e)
					want[key] = e
					break
				}
				var batch []*entry
				for i, count := 0, int(next()%16)+1; i < 64 && len(batch) < count; i++ {
					key := keyOf((k + i) % 64)
					if want[key] == nil {
						e := newEntry(key)
						batch = append(batch, e)
						want[key] = e
					}
				}
				x.addBatch(batch, hashesOf(&x, batch))
				for _, e := range batch {
					check(e.key())
				}
			}
			check(key)
			if x.len() != len(want) {
				t.Fatalf("len %d, want %d", x.len(), len(want))
			}
			if x.len()*4 > x.cur.slots()*3 {
				t.Fatalf("%d keys in %d slots: more than three quarters full", x.len(), x.cur.slots())
			}
			if op%8 == 7 || x.old.groups != nil { // all of them while a move is under way
				checkAll()
			}
		}
		checkAll()
		x.remove("absent")
		if x.len() != len(want) {
			t.Fatalf("len %d after removing an absent key, want %d", x.len(), len(want))
		}
	})
}

// keyWithSlot is a key, k's, whose own slot in a table of 128 slots or
// fewer (the low seven bits of its hash) is slot, or slot's image in a
// smaller table.
func keyWithSlot(x *keyIndex, k int, slot uint64) string {
	buf := fmt.Appendf(nil, "k%02d/", k)
	for j := 0; ; j++ {
		key := strconv.AppendInt(buf, int64(j), 10)
		if h, _ := x.hash(string(key)); h&127 == slot {
			return string(key)
		}
	}
}

// hashesOf is what addBatch takes beside es: their keys' hashes in x.
func hashesOf(x *keyIndex, es []*entry) []uint64 {
	hs := make([]uint64, len(es))
	for i, e := range es {
		hs[i], _ = x.hash(e.key())
	}
	return hs
}

// A restore faults a fresh table in by writing to it (faultIn): what it
// writes must leave every slot empty, at every size.
func TestFaultedInTableIsEmpty(t *testing.T) {
	for _, size := range []int{8, 64, 1 << 10, 1 << 16} {
		table := newSlotTable(size)
		table.faultIn()
		for i := range uint64(table.slots()) {
			require.Zero(t, table.tag(i), "size %d: slot %d has a tag", size, i)
			require.Nil(t, table.at(i), "size %d: slot %d has an entry", size, i)
		}
	}
}
