package fsm

import (
	"syscall"
	"unsafe"
)

// adviseHugePages asks the kernel to back the whole huge pages in
// [p, p+n) with huge pages (MADV_HUGEPAGE), before anything touches
// them. Best effort: a kernel that does not do transparent huge pages, or
// is set never to, ignores it or fails, and nothing changes.
func adviseHugePages(p unsafe.Pointer, n uintptr) {
	if start, length, ok := hugePagesIn(p, n); ok {
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, start, length, syscall.MADV_HUGEPAGE)
	}
}
