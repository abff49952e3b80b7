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

// goActions are the runtime's own actions, read before any library could
// change them (package initialization runs after the runtime installs its
// handlers, and before main loads anything).
var goActions [maxSignal + 1]sigaction

func init() {
	for sig := 1; sig <= maxSignal; sig++ {
		if a, ok := get(sig); ok && a.handler != sigDfl && a.handler != sigIgn {
			goActions[sig] = a
		}
	}
}

func get(sig int) (sigaction, bool) {
	var old sigaction
	_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	return old, e == 0
}

func set(sig int, a sigaction) bool {
	_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&a)), 0, 8, 0, 0)
	return e == 0
}

// Changed names the signals Fix would change now.
func Changed() []syscall.Signal { return walk(false) }

// Fix repairs the signal actions a library changed, and returns the
// signals it changed back. Where Go's handler is installed with other
// flags or mask than the runtime gave it (NVRTC's LLVM installs its own
// SIGINT, SIGTERM and SIGXFSZ handlers and, when done, puts Go's back
// without SA_ONSTACK and SA_SIGINFO), the runtime's action is restored.
// Where a foreign handler lacks SA_ONSTACK, the flag is added.
func Fix() []syscall.Signal { return walk(true) }

func walk(repair bool) []syscall.Signal {
	var fixed []syscall.Signal
	for sig := 1; sig <= maxSignal; sig++ {
		if sig == int(syscall.SIGKILL) || sig == int(syscall.SIGSTOP) {
			continue
		}
		a, ok := get(sig)
		if !ok || a.handler == sigDfl || a.handler == sigIgn {
			continue
		}
		switch goAct := goActions[sig]; {
		case a.handler == goAct.handler:
			if a == goAct {
				continue
			}
			a = goAct
		case a.flags&saOnStack != 0:
			continue
		default:
			a.flags |= saOnStack
		}
		if !repair || set(sig, a) {
			fixed = append(fixed, syscall.Signal(sig))
		}
	}
	return fixed
}
