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
	seed  maphash.Seed
	tags  []uint8
	slots []*entry
	n     int
}

// newKeyIndex returns an index with room for n keys before it grows.
func newKeyIndex(n int) keyIndex {
	size := 8
	for size/4*3 < n {
		size *= 2
	}
	return keyIndex{seed: maphash.MakeSeed(), tags: make([]uint8, size), slots: make([]*entry, size)}
}

func (x *keyIndex) len() int { return x.n }

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
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch x.tags[i] {
		case 0:
			return nil
		case tag:
			if e := x.slots[i]; e.key() == key {
				return e
			}
		}
	}
}

// add adds e, whose key is not in the index.
func (x *keyIndex) add(e *entry) {
	if (x.n+1)*4 > len(x.slots)*3 {
		x.grow()
	}
	x.place(e)
	x.n++
}

// place puts e in the first empty slot from its own.
func (x *keyIndex) place(e *entry) {
	h, tag := x.hash(e.key())
	mask := uint64(len(x.slots) - 1)
	i := h & mask
	for x.tags[i] != 0 {
		i = (i + 1) & mask
	}
	x.tags[i], x.slots[i] = tag, e
}

// grow doubles the slots (to 8 for an empty index) and places every entry
// again.
func (x *keyIndex) grow() {
	old := x.slots
	if x.seed == (maphash.Seed{}) {
		x.seed = maphash.MakeSeed()
	}
	size := max(8, 2*len(old))
	x.tags, x.slots = make([]uint8, size), make([]*entry, size)
	for _, e := range old {
		if e != nil {
			x.place(e)
		}
	}
}

// remove takes key out of the index, if it is there.
func (x *keyIndex) remove(key string) {
	if x.n == 0 {
		return
	}
	h, tag := x.hash(key)
	mask := uint64(len(x.slots) - 1)
	i := h & mask
	for ; ; i = (i + 1) & mask {
		if x.tags[i] == 0 {
			return
		}
		if x.tags[i] == tag && x.slots[i].key() == key {
			break
		}
	}
	// Shift back each later entry of the run whose own slot is at or
	// before the hole (cyclically), so that every entry stays reachable
	// from its own slot without crossing an empty one.
	for j := (i + 1) & mask; x.tags[j] != 0; j = (j + 1) & mask {
		home, _ := x.hash(x.slots[j].key())
		if (j-home)&mask >= (j-i)&mask {
			x.tags[i], x.slots[i] = x.tags[j], x.slots[j]
			i = j
		}
	}
	x.tags[i], x.slots[i] = 0, nil
	x.n--
}
