package fsm

import (
	"fmt"
	"iter"
	"math/rand/v2"
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
