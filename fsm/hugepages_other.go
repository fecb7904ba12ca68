//go:build !linux

package fsm

import "unsafe"

// adviseHugePages does nothing here: only Linux is asked for huge pages.
func adviseHugePages(p unsafe.Pointer, n uintptr) {}
