package fsm

import "unsafe"

// An entry's key is stored inline, in the same allocation right after the
// entry's fields, rather than as a string field pointing at a copy of its
// own: one allocation a key instead of two, and 16 bytes of string header
// fewer (a 16-byte key and its entry take one 64-byte block, where an
// entry with a string field took 64 and its key 16 more). The entry keeps
// the key's length; key() makes the string in place. The key's bytes are
// written once, by newEntry or entrySlab, and never change while anything
// can see them, so the strings key() returns are as immutable as any.
//
// Go has no variable-sized structs, so an entry is allocated as one of a
// fixed list of types, entry plus a byte array, sized so that each is a
// size class of Go's allocator (nothing is wasted between the key and the
// block's end but the key's own rounding).

// withKey is an entry with room for a key of up to len(K) bytes after it.
type withKey[K any] struct {
	e entry
	k K
}

// keyClass allocates entries whose keys have at most max bytes: one, or a
// block of n laid out stride bytes apart.
type keyClass struct {
	max    int
	stride uintptr
	one    func() *entry
	many   func(n int) unsafe.Pointer
}

// perBlock is how many of c's entries a restore's block holds: as many as
// fit restoreBlock bytes. Entries hold no pointers (moreTable), so Go puts
// no header before a block: 128 entries of 64 bytes fill an 8192-byte
// block exactly.
func (c *keyClass) perBlock() int {
	return restoreBlock / int(c.stride)
}

func classOf[K any](max int) keyClass {
	var k K
	if int(unsafe.Sizeof(k)) != max {
		panic("fsm: key class of the wrong size")
	}
	return keyClass{
		max:    max,
		stride: unsafe.Sizeof(withKey[K]{}),
		one:    func() *entry { return &new(withKey[K]).e },
		many:   func(n int) unsafe.Pointer { return unsafe.Pointer(&make([]withKey[K], n)[0]) },
	}
}

// keyClasses are in ascending size, each entry plus its key a size class
// (64, 80, ... 576 bytes with a 48-byte entry); the last holds MaxKeyLen.
var keyClasses = [...]keyClass{
	classOf[[16]byte](16), classOf[[32]byte](32), classOf[[48]byte](48), classOf[[64]byte](64),
	classOf[[80]byte](80), classOf[[96]byte](96), classOf[[112]byte](112), classOf[[128]byte](128),
	classOf[[144]byte](144), classOf[[160]byte](160), classOf[[176]byte](176), classOf[[192]byte](192),
	classOf[[208]byte](208), classOf[[240]byte](240), classOf[[272]byte](272), classOf[[304]byte](304),
	classOf[[336]byte](336), classOf[[368]byte](368), classOf[[400]byte](400), classOf[[432]byte](432),
	classOf[[464]byte](464), classOf[[528]byte](528),
}

// keyClassOf is, by (length+15)/16, the index in keyClasses of the
// smallest class that holds a key of that length.
var keyClassOf = func() (t [(MaxKeyLen+15)/16 + 1]uint8) {
	c := 0
	for i := range t {
		for keyClasses[c].max < i*16 {
			c++
		}
		t[i] = uint8(c)
	}
	return t
}()

func classFor(n int) *keyClass { return &keyClasses[keyClassOf[(n+15)/16]] }

// keyData is the room for e's key, right after its fields.
func (e *entry) keyData() *byte {
	return (*byte)(unsafe.Add(unsafe.Pointer(e), unsafe.Sizeof(entry{})))
}

// key is e's key.
func (e *entry) key() string { return unsafe.String(e.keyData(), e.keyLen) }

// setKey writes key into e's room for it, which holds it (its class).
func (e *entry) setKey(key string) {
	e.keyLen = uint32(copy(unsafe.Slice(e.keyData(), len(key)), key))
}

// newEntry returns an entry for key (1..MaxKeyLen bytes), in no deadline
// index yet. The key is copied: the entry never pins the caller's buffer.
func newEntry(key string) *entry {
	e := classFor(len(key)).one()
	e.index = -1
	e.setKey(key)
	return e
}

// entrySlab hands out entries from blocks of each class, for a restore:
// one allocation for many keys. A block stays allocated while any entry in
// it is in use.
type entrySlab struct {
	blocks [len(keyClasses)]struct {
		base    unsafe.Pointer
		used, n int
	}
	ready prefaulted[*entryBlock] // blocks made, and faulted in, on another goroutine (prefaultBlocks); zero: none
}

// entryBlock is room for a block of entries of any class: entries hold no
// pointers, so the collector need not know their type.
type entryBlock [restoreBlock]byte

// prefaultBlocks makes want entry blocks and faults them in on another
// goroutine (see prefault): at ten million keys the first touch of the
// entries' 640 MB was a third of a restore's reading.
func prefaultBlocks(want uint64, stop <-chan struct{}) prefaulted[*entryBlock] {
	return prefault(want, 64, stop, func() *entryBlock { return new(entryBlock) }, func(b *entryBlock) {
		// Writes only (take clears each entry it hands out). The store to
		// b[0] is its own nil check; in the loop alone, the compiler checked
		// b by reading b[0] first, which faults a page in twice (pageSize).
		b[0] = 0
		for i := pageSize; i < len(b); i += pageSize {
			b[i] = 0
		}
	})
}

// pageSize is the smallest page of the systems Go runs on: a write every
// pageSize bytes faults every page of fresh memory in (each more than once
// where pages are larger). Fresh memory must be written before anything
// reads it: a page first read is mapped to the kernel's shared page of
// zeros, and the write that follows replaces that mapping, which flushes
// the TLB of every other CPU running the process, by an interrupt that a
// virtual machine's host must deliver (on Linux, do_wp_page and
// flush_tlb_mm_range). In a 10,000,000-lock restore on a 2-CPU VM, those
// flushes were a quarter of its CPU time.
const pageSize = 4096

// prefaulted is what prefault makes: values made and faulted in (ready),
// and values made but not faulted in yet (spare). A nil channel has
// nothing more.
type prefaulted[T any] struct {
	ready, spare <-chan T
}

// take is a value prefault made, faulted in if one is ready now, else one
// not faulted in yet (the caller faults it in), else none: the caller
// makes its own rather than wait.
func (p *prefaulted[T]) take() (T, bool) {
	if v, ok := takeFrom(&p.ready); ok {
		return v, true
	}
	return takeFrom(&p.spare)
}

// takeFrom is a value from *c if one is there now; once *c is closed and
// empty, it is set to nil.
func takeFrom[T any](c *<-chan T) (T, bool) {
	var v T
	if *c == nil {
		return v, false
	}
	select {
	case v, ok := <-*c:
		if !ok {
			*c = nil
		}
		return v, ok
	default:
		return v, false
	}
}

// prefault makes want values with fresh on another goroutine, all of them
// first, as spares; then, until none is spare or stop is closed, it takes
// a spare, touches it with touch and hands it out as ready (ahead at most
// before it waits). Touching a value's memory once a page pays there,
// rather than on the goroutine that reads a snapshot (which every other
// step of a restore waits for), the page faults of memory new to the
// process. Making them all first, as fast as it can, is for Go's
// collector, which starts a collection each time the heap has doubled
// since the last: one that starts late in a restore of millions of keys
// marks millions of the index's pointers, on the restore's own goroutines
// (allocation assists) as much as beside them. Made at the start, the
// values grow the heap while there is little to mark (fresh memory is
// neither cleared nor faulted in by its allocation), and the collection
// after them sets the next one's start beyond what the rest of the restore
// allocates. A taker that finds nothing ready takes a spare, so that no
// value is made twice. Making them all at once is bounded by want, which a
// restore derives from a key count already checked against the snapshot's
// bytes, and costs address space only until touched: a snapshot found
// damaged further on stops the touching and leaves the rest to the
// collector.
func prefault[T any](want uint64, ahead int, stop <-chan struct{}, fresh func() T, touch func(T)) prefaulted[T] {
	ready, spare := make(chan T, ahead), make(chan T, want)
	go func() {
		defer close(ready)
		for range want {
			spare <- fresh()
		}
		close(spare)
		for v := range spare {
			touch(v)
			select {
			case ready <- v:
			case <-stop:
				return
			}
		}
	}()
	return prefaulted[T]{ready: ready, spare: spare}
}

// block returns room for n entries of class c: a block faulted in ahead
// when n fills one and one is ready, else a fresh allocation (the
// reading does not wait for the other goroutine: when that falls behind,
// both fault pages in).
func (s *entrySlab) block(c *keyClass, n int) unsafe.Pointer {
	if n == c.perBlock() {
		if b, ok := s.ready.take(); ok {
			return unsafe.Pointer(b)
		}
	}
	return c.many(n)
}

// take returns an entry for key, copied as newEntry does. left is how
// many more entries the restore will want at most, so that the last
// blocks are no larger than needed.
func (s *entrySlab) take(key []byte, left uint64) *entry {
	i := keyClassOf[(len(key)+15)/16]
	c, b := &keyClasses[i], &s.blocks[i]
	if b.used == b.n {
		b.n = int(min(left, uint64(c.perBlock())))
		b.base, b.used = s.block(c, b.n), 0
	}
	e := (*entry)(unsafe.Add(b.base, uintptr(b.used)*c.stride))
	b.used++
	*e = entry{index: -1} // a prefaulted block is not zeroed
	e.keyLen = uint32(copy(unsafe.Slice(e.keyData(), len(key)), key))
	return e
}
