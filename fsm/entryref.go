package fsm

import "unsafe"

// entryRef refers to an entry without Go's collector seeing the reference:
// the entry's address as an integer. The key order's leaves and the lease
// heap hold entries this way; only the key index holds them by pointer.
//
// Why: every member keeps every lock, and a collection marks every pointer
// it finds. With three pointers a lock (index, order, lease heap), a
// member's restart that reads ten million locks spent a third of its CPU
// in the collector marking them, every one pointing into another block of
// entries (measured in a new process, 2026-12-03); with one, the order's
// leaves and the lease heap's chunks hold no pointer and are not scanned at
// all.
//
// It is sound because Go's collector never moves heap objects and an entry
// in the order or the lease heap is always in the key index too: forget
// takes it out of the lease heap and the order as it takes it out of the
// index, and a restore sends each entry to the index's goroutine by pointer
// (indexBatch) while its leaf holds it by reference. The tests check after
// every command that each entry the order and the lease heap hold is the
// index's entry for its key.
type entryRef uintptr

func refTo(e *entry) entryRef { return entryRef(uintptr(unsafe.Pointer(e))) }

// get is the entry r refers to. The integer's bits are read as a pointer
// (not converted from uintptr, which the race detector's pointer checks
// refuse for an address that came from nowhere they can see).
func (r entryRef) get() *entry { return *(**entry)(unsafe.Pointer(&r)) }
