package fsm

import "unsafe"

// hugePage is the size of the pages large arrays ask the kernel for.
const hugePage = 2 << 20

// makeLarge is make([]T, n), asking the kernel to back the array with
// huge pages when it spans several: the key index, the lease ends and a
// restore's entry blocks run to hundreds of megabytes at millions of
// keys. Faulting fresh memory in a page of 4 KiB at a time was the larger
// part of a restore there (on a virtual machine, about 3 s a GiB; in
// pages of 2 MiB, half that); the advice changes nothing else.
func makeLarge[T any](n int) []T {
	s := make([]T, n)
	if n > 0 {
		var zero T
		adviseHugePages(unsafe.Pointer(unsafe.SliceData(s)), uintptr(n)*unsafe.Sizeof(zero))
	}
	return s
}

// hugePagesIn is the part of [p, p+n) made of whole huge pages, if it is
// worth advising: at least one.
func hugePagesIn(p unsafe.Pointer, n uintptr) (start, length uintptr, ok bool) {
	start = (uintptr(p) + hugePage - 1) &^ (hugePage - 1)
	end := (uintptr(p) + n) &^ (hugePage - 1)
	if end <= start {
		return 0, 0, false
	}
	return start, end - start, true
}
