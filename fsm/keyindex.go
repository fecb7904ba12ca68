package fsm

import (
	"hash/maphash"
	"unsafe"
)

// keyIndex finds a key's entry for the commands' point lookups: an
// open-addressing hash table of entry pointers (the only references to an
// entry the collector sees: see entryRef) with linear probing, kept
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
	seed maphash.Seed
	cur  slotTable
	// old is the table cur replaced, while its entries move into cur a few
	// slots at each add or remove (moveSome) rather than all at once:
	// placing millions of keys again in one step held up the command that
	// grew the index for seconds (at 6.3 million keys, past a client's
	// timeout) on every member at once. The move goes around old from
	// start, a slot that was empty when it began, so it takes every run of
	// full slots from its first slot on: the moved slots, moved of them
	// from start on, are empty, and a key still in old lies past them on
	// its run. Lookups look in both tables.
	old   slotTable
	start uint64
	moved uint64
	n     int
	// loaded is the sum of what addBatch read ahead: the compiler drops a
	// load whose value nothing uses.
	loaded uint64
}

// slotTable is the open-addressing table: 8 * len(groups) slots, a power
// of two.
type slotTable struct {
	groups []slotGroup
	mask   uint64
}

// slotGroup is eight consecutive slots, their tags beside their pointers:
// a probe reads one group (72 bytes), where tags and slots in two arrays
// took two cache misses. At ten million keys, filling the index was the
// larger half of a restore, nearly all of it waiting on memory.
type slotGroup struct {
	tags  [8]uint8
	slots [8]*entry
}

func newSlotTable(size int) slotTable {
	return slotTable{groups: make([]slotGroup, size/8), mask: uint64(size - 1)}
}

func (t *slotTable) slots() int { return len(t.groups) * 8 }

// faultIn writes to every page of a table fresh from the system, before a
// probe reads one (pageSize): filling it probes each group before setting
// it, so each of its pages was faulted in twice, the second time with a
// flush of the other CPUs' TLBs. A restore calls it once the table is made.
func (t *slotTable) faultIn() {
	perPage := pageSize / int(unsafe.Sizeof(slotGroup{}))
	for i := 0; i < len(t.groups); i += perPage {
		t.groups[i].tags[0] = 0
	}
}

// tag is slot i's tag, 0 for an empty slot.
func (t *slotTable) tag(i uint64) uint8 { return t.groups[i>>3].tags[i&7] }

// at is slot i's entry.
func (t *slotTable) at(i uint64) *entry { return t.groups[i>>3].slots[i&7] }

func (t *slotTable) set(i uint64, tag uint8, e *entry) {
	g := &t.groups[i>>3]
	g.tags[i&7], g.slots[i&7] = tag, e
}

// find is the slot of key, probing from slot from, or false.
func (t *slotTable) find(from uint64, tag uint8, key string) (uint64, bool) {
	for i := from; ; i = (i + 1) & t.mask {
		switch t.tag(i) {
		case 0:
			return 0, false
		case tag:
			if t.at(i).key() == key {
				return i, true
			}
		}
	}
}

// place puts e in the first empty slot from its own (h's).
func (t *slotTable) place(h uint64, tag uint8, e *entry) {
	i := h & t.mask
	for t.tag(i) != 0 {
		i = (i + 1) & t.mask
	}
	t.set(i, tag, e)
}

// newKeyIndex returns an index with room for n keys before it grows.
func newKeyIndex(n int) keyIndex { return newKeyIndexSeeded(n, maphash.MakeSeed()) }

// newKeyIndexSeeded is newKeyIndex hashing with seed, for a caller that
// hashes keys for addBatch before the index exists.
func newKeyIndexSeeded(n int, seed maphash.Seed) keyIndex {
	size := 8
	for size/4*3 < n {
		size *= 2
	}
	return keyIndex{seed: seed, cur: newSlotTable(size)}
}

func (x *keyIndex) len() int { return x.n }

// hash is key's hash: its low bits choose the first slot, its top seven
// the tag (the low bit set, so no tag is zero).
func (x *keyIndex) hash(key string) (uint64, uint8) {
	h := hashKey(x.seed, key)
	return h, tagOf(h)
}

// hashKey is key's hash in an index seeded with seed.
func hashKey(seed maphash.Seed, key string) uint64 { return maphash.String(seed, key) }

// tagOf is the tag of a key whose hash is h.
func tagOf(h uint64) uint8 { return uint8(h>>56) | 1 }

// get is key's entry, or nil.
func (x *keyIndex) get(key string) *entry {
	if x.n == 0 {
		return nil
	}
	h, tag := x.hash(key)
	if i, ok := x.cur.find(h&x.cur.mask, tag, key); ok {
		return x.cur.at(i)
	}
	if i, ok := x.findOld(h, tag, key); ok {
		return x.old.at(i)
	}
	return nil
}

// findOld is key's slot in old, if it is still there. A probe whose own
// slot was moved starts at the first slot not yet moved: the moved slots
// are empty now, but were full when the keys after them on the run were
// placed, and the run was moved from its first slot on.
func (x *keyIndex) findOld(h uint64, tag uint8, key string) (uint64, bool) {
	if x.old.groups == nil {
		return 0, false
	}
	from := h & x.old.mask
	if (from-x.start)&x.old.mask < x.moved {
		from = (x.start + x.moved) & x.old.mask
	}
	return x.old.find(from, tag, key)
}

// add adds e, whose key is not in the index.
func (x *keyIndex) add(e *entry) {
	if (x.n+1)*4 > x.cur.slots()*3 {
		x.grow()
	}
	h, tag := x.hash(e.key())
	x.cur.place(h, tag, e)
	x.n++
	x.moveSome()
}

// addBatch adds es, none of whose keys is in the index nor twice in es,
// in the slots add would give them one at a time; hashes[i] is es[i]'s
// key's hash (hashKey with the index's seed), made by the caller, which
// has the keys at hand: a restore's reader has just written each, where
// the index's goroutine would read each from memory again. A restore
// fills an index sized for all its keys, where each key's first slot is a
// cache miss (and a TLB miss) into a table of up to hundreds of megabytes,
// and add waits for each in turn: whether the slot it reads is empty
// decides what it does next. Here a batch's groups are read first, in a
// loop of nothing but loads, so that the processor, looking a few hundred
// instructions ahead, has dozens of them under way at once (loads between
// hashing each key, a hundred instructions apart, gained little); the
// placing after them finds the groups in the cache. At ten million keys this took
// the index's fill from about 1.5 s of CPU a restore to 1.1 s (the fill
// alone, outside a restore: from 90-110 ns a key to 40-45).
func (x *keyIndex) addBatch(es []*entry, hashes []uint64) {
	if x.old.groups != nil || (x.n+len(es))*4 > x.cur.slots()*3 {
		for _, e := range es {
			x.add(e)
		}
		return
	}
	for len(es) > 0 {
		batch := es[:min(len(es), addBatchMax)]
		es = es[len(batch):]
		var loaded uint64
		for _, h := range hashes[:len(batch)] {
			g := &x.cur.groups[(h&x.cur.mask)>>3]
			// A group spans two cache lines at most: its first word and
			// its last.
			loaded += uint64(g.tags[0]) + uint64(uintptr(unsafe.Pointer(g.slots[7])))
		}
		x.loaded = loaded
		for k, e := range batch {
			h := hashes[k]
			x.cur.place(h, tagOf(h), e)
		}
		hashes = hashes[len(batch):]
		x.n += len(batch)
	}
}

// addBatchMax is how many keys addBatch reads ahead of placing them: more
// than the misses a core keeps under way at once.
const addBatchMax = 64

// grow starts moving the entries into a table twice the size (8 slots for
// an empty index). The move of the previous table is over by then: it
// moves moveStep slots at each add, and cur, twice old's size, takes
// old's size in adds and more to fill from three eighths to three
// quarters.
func (x *keyIndex) grow() {
	if x.seed == (maphash.Seed{}) {
		x.seed = maphash.MakeSeed()
	}
	for x.old.groups != nil { // only if moveStep were too small
		x.moveSome()
	}
	size := max(8, 2*x.cur.slots())
	x.old, x.cur, x.moved = x.cur, newSlotTable(size), 0
	if x.n == 0 {
		x.old = slotTable{}
		return
	}
	x.start = 0
	for x.old.tag(x.start) != 0 { // a quarter of the slots at least are empty
		x.start++
	}
}

// moveStep is how many of old's slots each add or remove moves into cur.
const moveStep = 8

// moveSome moves the entries of the next moveStep slots of old into cur.
func (x *keyIndex) moveSome() {
	if x.old.groups == nil {
		return
	}
	end := min(x.moved+moveStep, uint64(x.old.slots()))
	for k := x.moved; k < end; k++ {
		i := (x.start + k) & x.old.mask
		if e := x.old.at(i); e != nil {
			h, tag := x.hash(e.key())
			x.cur.place(h, tag, e)
			x.old.set(i, 0, nil)
		}
	}
	x.moved = end
	if end == uint64(x.old.slots()) {
		x.old, x.start, x.moved = slotTable{}, 0, 0
	}
}

// remove takes key out of the index, if it is there.
func (x *keyIndex) remove(key string) {
	if x.n == 0 {
		return
	}
	h, tag := x.hash(key)
	if i, ok := x.cur.find(h&x.cur.mask, tag, key); ok {
		x.removeAt(&x.cur, i)
	} else if i, ok := x.findOld(h, tag, key); ok {
		x.removeAt(&x.old, i)
	} else {
		return
	}
	x.n--
	x.moveSome()
}

// removeAt empties slot i of t and shifts back each later entry of the
// run whose own slot is at or before the hole (cyclically), so that every
// entry stays reachable from its own slot without crossing an empty one.
// In old, the moved slots are empty and end every run that reaches them:
// the runs were moved from their first slot on, so no key left in old
// lies past a moved slot on its run.
func (x *keyIndex) removeAt(t *slotTable, i uint64) {
	mask := t.mask
	for j := (i + 1) & mask; t.tag(j) != 0; j = (j + 1) & mask {
		home, _ := x.hash(t.at(j).key())
		if (j-home)&mask >= (j-i)&mask {
			t.set(i, t.tag(j), t.at(j))
			i = j
		}
	}
	t.set(i, 0, nil)
}
