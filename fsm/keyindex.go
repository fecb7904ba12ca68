package fsm

import "hash/maphash"

// keyIndex finds a key's entry for the commands' point lookups: an
// open-addressing hash table of entry pointers with linear probing, kept
// at most three quarters full, and beside each slot a tag byte (zero for
// an empty slot, else seven bits of the key's hash) so that a probe reads
// an entry only when its tag matches. It replaces a map[string]*entry,
// which kept a second copy of every key's string header (16 bytes) beside
// its pointer: here a key costs 9 bytes a slot, 12 to 24 bytes a key
// (a map cost 28 to 57), and the key is stored once, in its entry.
// Removal shifts the slots after the hole back (no tombstones), so a
// lookup never probes past the first empty slot.
//
// The hash is seeded at random, as Go's maps are, so that keys chosen to
// collide cannot be predicted; nothing the machine decides depends on
// where a key lands (the index is never iterated).
type keyIndex struct {
	seed   maphash.Seed
	groups []slotGroup
	mask   uint64 // slots - 1: the slots are 8 * len(groups), a power of two
	n      int
}

// slotGroup is eight consecutive slots, their tags beside their pointers:
// a probe reads one group (72 bytes), where tags and slots in two arrays
// took two cache misses. At ten million keys, filling the index was the
// larger half of a restore, nearly all of it waiting on memory.
type slotGroup struct {
	tags  [8]uint8
	slots [8]*entry
}

// newKeyIndex returns an index with room for n keys before it grows.
func newKeyIndex(n int) keyIndex {
	size := 8
	for size/4*3 < n {
		size *= 2
	}
	return keyIndex{seed: maphash.MakeSeed(), groups: makeLarge[slotGroup](size / 8), mask: uint64(size - 1)}
}

func (x *keyIndex) len() int { return x.n }

func (x *keyIndex) slots() int { return len(x.groups) * 8 }

// tag is slot i's tag, 0 for an empty slot.
func (x *keyIndex) tag(i uint64) uint8 { return x.groups[i>>3].tags[i&7] }

// at is slot i's entry.
func (x *keyIndex) at(i uint64) *entry { return x.groups[i>>3].slots[i&7] }

func (x *keyIndex) set(i uint64, tag uint8, e *entry) {
	g := &x.groups[i>>3]
	g.tags[i&7], g.slots[i&7] = tag, e
}

// hash is key's hash: its low bits choose the first slot, its top seven
// the tag (the low bit set, so no tag is zero).
func (x *keyIndex) hash(key string) (uint64, uint8) {
	h := maphash.String(x.seed, key)
	return h, uint8(h>>56) | 1
}

// get is key's entry, or nil.
func (x *keyIndex) get(key string) *entry {
	if x.n == 0 {
		return nil
	}
	h, tag := x.hash(key)
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		switch x.tag(i) {
		case 0:
			return nil
		case tag:
			if e := x.at(i); e.key() == key {
				return e
			}
		}
	}
}

// add adds e, whose key is not in the index.
func (x *keyIndex) add(e *entry) {
	if (x.n+1)*4 > x.slots()*3 {
		x.grow()
	}
	x.place(e)
	x.n++
}

// place puts e in the first empty slot from its own.
func (x *keyIndex) place(e *entry) {
	h, tag := x.hash(e.key())
	i := h & x.mask
	for x.tag(i) != 0 {
		i = (i + 1) & x.mask
	}
	x.set(i, tag, e)
}

// grow doubles the slots (to 8 for an empty index) and places every entry
// again.
func (x *keyIndex) grow() {
	old := x.groups
	if x.seed == (maphash.Seed{}) {
		x.seed = maphash.MakeSeed()
	}
	size := max(8, 2*x.slots())
	x.groups, x.mask = makeLarge[slotGroup](size/8), uint64(size-1)
	for gi := range old {
		for _, e := range old[gi].slots {
			if e != nil {
				x.place(e)
			}
		}
	}
}

// remove takes key out of the index, if it is there.
func (x *keyIndex) remove(key string) {
	if x.n == 0 {
		return
	}
	h, tag := x.hash(key)
	mask := x.mask
	i := h & mask
	for ; ; i = (i + 1) & mask {
		if x.tag(i) == 0 {
			return
		}
		if x.tag(i) == tag && x.at(i).key() == key {
			break
		}
	}
	// Shift back each later entry of the run whose own slot is at or
	// before the hole (cyclically), so that every entry stays reachable
	// from its own slot without crossing an empty one.
	for j := (i + 1) & mask; x.tag(j) != 0; j = (j + 1) & mask {
		home, _ := x.hash(x.at(j).key())
		if (j-home)&mask >= (j-i)&mask {
			x.set(i, x.tag(j), x.at(j))
			i = j
		}
	}
	x.set(i, 0, nil)
	x.n--
}
