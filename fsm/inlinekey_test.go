package fsm

import (
	"bytes"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// keyOfLen is a key of n bytes whose bytes differ from position to
// position, so that a key read from the wrong place or cut short shows.
func keyOfLen(n int, salt byte) []byte {
	k := make([]byte, n)
	for i := range k {
		k[i] = byte(i*7) + salt
	}
	return k
}

// Every key length fits the smallest class that holds it, and an entry
// gives back exactly the key it was made with: a copy, not the caller's
// bytes.
func TestInlineKeyEveryLength(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) == 8 {
		require.EqualValues(t, 48, unsafe.Sizeof(entry{}), "the key classes are sized for a 48-byte entry")
	}
	for i, c := range keyClasses {
		require.Equal(t, unsafe.Sizeof(entry{})+uintptr(c.max), c.stride, "class %d", i)
	}
	for n := 1; n <= MaxKeyLen; n++ {
		i := int(keyClassOf[(n+15)/16])
		require.Same(t, &keyClasses[i], classFor(n))
		require.GreaterOrEqual(t, keyClasses[i].max, n)
		if i > 0 {
			require.Less(t, keyClasses[i-1].max, n, "length %d: a smaller class holds it", n)
		}
		k := keyOfLen(n, 1)
		e := newEntry(string(k))
		k[0]++ // the caller's buffer changes; the entry's copy does not
		require.Equal(t, string(keyOfLen(n, 1)), e.key(), "length %d", n)
		require.EqualValues(t, -1, e.index)
	}
}

// A restore's entries, many to a block, keep their keys apart, whatever
// the mix of lengths and however few are left for the last blocks.
func TestEntrySlabKeepsKeysApart(t *testing.T) {
	var s entrySlab
	const n = 3*127 + 5 // blocks of 127 16-byte keys
	lengths := []int{16, 1, 17, 512, 16, 33, 200}
	var entries []*entry
	for i := range n {
		k := keyOfLen(lengths[i%len(lengths)], byte(i))
		e := s.take(k, uint64(n-i))
		k[0]++
		entries = append(entries, e)
	}
	for i, e := range entries {
		want := keyOfLen(lengths[i%len(lengths)], byte(i))
		require.True(t, bytes.Equal(want, []byte(e.key())), "entry %d", i)
		require.EqualValues(t, -1, e.index)
	}
}

// An entry holds no pointer, with its key or without: Go's collector then
// never scans the millions of them, nor writes a pointer map for each block
// a restore allocates (moreTable holds what an entry would point to).
func TestEntriesHoldNoPointers(t *testing.T) {
	var holdsPointers func(reflect.Type) bool
	holdsPointers = func(ty reflect.Type) bool {
		switch ty.Kind() {
		case reflect.Pointer, reflect.UnsafePointer, reflect.Map, reflect.Slice, reflect.String, reflect.Interface, reflect.Func, reflect.Chan:
			return true
		case reflect.Array:
			return ty.Len() > 0 && holdsPointers(ty.Elem())
		case reflect.Struct:
			for i := range ty.NumField() {
				if holdsPointers(ty.Field(i).Type) {
					return true
				}
			}
		}
		return false
	}
	for _, ty := range []reflect.Type{
		reflect.TypeFor[entry](), reflect.TypeFor[withKey[[16]byte]](), reflect.TypeFor[withKey[[528]byte]](),
		// The order's leaves and the lease heap refer to entries without
		// a pointer (entryRef): the collector scans neither.
		reflect.TypeFor[leaseDeadline](), reflect.TypeFor[[orderMax]entryRef](),
	} {
		if holdsPointers(ty) {
			t.Errorf("%v holds a pointer", ty)
		}
	}
}

// An entry taken from a block faulted in ahead starts as newEntry's does,
// whatever the block held: its first touch wrote bytes into it.
func TestEntrySlabClearsPrefaultedBlocks(t *testing.T) {
	ready := make(chan *entryBlock, 1)
	dirty := new(entryBlock)
	for i := range dirty {
		dirty[i] = 0xff
	}
	ready <- dirty
	close(ready)
	s := entrySlab{ready: prefaulted[*entryBlock]{ready: ready}}
	n := keyClasses[0].perBlock()
	for i := range n {
		key := []byte{'k', byte('a' + i%26), byte('a' + i/26)}
		e := s.take(key, uint64(2*n-i))
		require.Equal(t, string(key), e.key())
		require.True(t, e.owner.IsZero(), "entry %d: owner %x", i, e.owner)
		require.Zero(t, e.token, "entry %d", i)
		require.Zero(t, e.expiresAt, "entry %d", i)
		require.Zero(t, e.more, "entry %d", i)
		require.Equal(t, int32(-1), e.index, "entry %d", i)
	}
	require.Equal(t, unsafe.Pointer(dirty), s.blocks[0].base, "the slab took the ready block")
}

// The key order and the lease heap hold entries by entryRef, which keeps
// nothing alive: a restore's entries are kept by its batches for the index
// until the index has them, and after that by the index. Collections run
// without pause here while a restore reads, and while keys go and others
// come into the memory the collector frees; every entry must still be
// what it was.
func TestEntriesOutliveCollectionsThroughRestoreAndChurn(t *testing.T) {
	const n = 30_000
	want := New(nil)
	for i := range n {
		// Keys of several lengths: entries of several classes share blocks.
		key := fmt.Sprintf("held/%0*d", 8+(i%5)*20, i)
		want.Apply(acquire(time.Duration(i), key, numberedOwner(i), time.Hour, 0))
	}
	snap := want.Snapshot()

	stop := make(chan struct{})
	collected := make(chan int)
	go func() {
		cycles := 0
		defer func() { collected <- cycles }()
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
				cycles++
			}
		}
	}()
	// The index falls behind the reader by a collection every few
	// batches: the entries read meanwhile are held by nothing but their
	// batches.
	batches := 0
	testHookIndexBatch = func() {
		if batches++; batches%8 == 1 {
			runtime.GC()
		}
	}
	defer func() { testHookIndexBatch = nil }()
	got := New(nil)
	err := got.RestoreFrom(bytes.NewReader(snap), int64(len(snap)))
	testHookIndexBatch = nil
	// Half the keys go, as many new ones come, into memory just freed.
	at := time.Duration(n)
	for i := 0; i < n; i += 2 {
		key := fmt.Sprintf("held/%0*d", 8+(i%5)*20, i)
		for _, m := range []*Machine{want, got} {
			m.Apply(release(at, key, numberedOwner(i)))
			m.Apply(acquire(at, strings.Replace(key, "held", "new", 1), numberedOwner(n+i), time.Hour, 0))
		}
		at++
	}
	close(stop)
	cycles := <-collected
	require.NoError(t, err)
	require.NoError(t, checkInternals(got))
	require.Equal(t, want.Snapshot(), got.Snapshot())
	if cycles < 2 {
		t.Fatalf("only %d collections ran beside the restore and the churn", cycles)
	}
}

// prefault makes every value first; a taker that finds none touched yet
// takes one not touched, so that no value is made twice and none is
// handed out twice.
func TestPrefaultHandsOutSparesWhileItTouches(t *testing.T) {
	const want = 6
	made := 0
	touching := make(chan int)
	release := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	p := prefault(want, 1, stop, func() int { made++; return made }, func(v int) {
		touching <- v
		<-release
	})
	first := <-touching // every value is made before the first is touched
	if made != want {
		t.Fatalf("%d values made before the first touch, want %d", made, want)
	}
	seen := map[int]bool{first: true}
	for range want - 1 {
		v, ok := p.take()
		if !ok || seen[v] {
			t.Fatalf("take while the first is touched: %d, %v (seen %v)", v, ok, seen)
		}
		seen[v] = true
	}
	close(release)
	v, ok := <-p.ready
	if !ok || v != first {
		t.Fatalf("ready after the touch: %d, %v; want %d", v, ok, first)
	}
	if v, ok := p.take(); ok {
		t.Fatalf("took %d after all %d were handed out", v, want)
	}
}
