//go:build linux && (amd64 || arm64)

package sigstack

import (
	"syscall"
	"unsafe"
)

// sigaction is the kernel's struct sigaction for rt_sigaction on amd64
// and arm64 (both have sa_restorer).
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const (
	saOnStack = 0x08000000
	sigDfl    = 0
	sigIgn    = 1
	maxSignal = 64
)

func get(sig int) (sigaction, bool) {
	var old sigaction
	_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	return old, e == 0
}

func set(sig int, a sigaction) bool {
	_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&a)), 0, 8, 0, 0)
	return e == 0
}

// Fix adds SA_ONSTACK to every installed handler (not the default, not
// ignored) that lacks it, and returns the signals it changed.
func Fix() []syscall.Signal {
	var fixed []syscall.Signal
	for sig := 1; sig <= maxSignal; sig++ {
		if sig == int(syscall.SIGKILL) || sig == int(syscall.SIGSTOP) {
			continue
		}
		a, ok := get(sig)
		if !ok || a.handler == sigDfl || a.handler == sigIgn || a.flags&saOnStack != 0 {
			continue
		}
		a.flags |= saOnStack
		if set(sig, a) {
			fixed = append(fixed, syscall.Signal(sig))
		}
	}
	return fixed
}
