//go:build linux && (amd64 || arm64)

package sigstack

import (
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"
	"time"
)

// Go's handler put back without SA_ONSTACK and SA_SIGINFO and with another
// mask, as NVRTC's LLVM leaves SIGINT (seen here with NVRTC 11.8), gets the
// runtime's exact action back, and the signal is then delivered to Go as
// usual.
func TestFixRestoresGosAction(t *testing.T) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1, syscall.SIGUSR2) // Go's handler on both
	defer signal.Stop(c)
	goAct, ok := get(int(syscall.SIGUSR1))
	if !ok || goAct.flags&saOnStack == 0 {
		t.Fatalf("Go's SIGUSR1 action %+v: want it installed with SA_ONSTACK", goAct)
	}
	orig, _ := get(int(syscall.SIGUSR2))
	defer set(int(syscall.SIGUSR2), orig)
	broken := goAct
	broken.flags &^= saOnStack | 4 // SA_SIGINFO
	broken.mask = 2
	if !set(int(syscall.SIGUSR2), broken) {
		t.Fatal("rt_sigaction failed")
	}
	if a, _ := get(int(syscall.SIGUSR2)); a.flags&saOnStack != 0 {
		t.Fatal("the broken action kept SA_ONSTACK")
	}
	fixed := Fix()
	if !slices.Contains(fixed, syscall.SIGUSR2) {
		t.Errorf("Fix changed %v, want SIGUSR2 among them", fixed)
	}
	if a, _ := get(int(syscall.SIGUSR2)); a != goActions[syscall.SIGUSR2] || a.flags&saOnStack == 0 {
		t.Errorf("SIGUSR2 after Fix: %+v; want the runtime's action %+v", a, goActions[syscall.SIGUSR2])
	}
	if again := Fix(); len(again) != 0 {
		t.Errorf("a second Fix changed %v, want nothing", again)
	}
	syscall.Kill(os.Getpid(), syscall.SIGUSR2)
	select {
	case s := <-c:
		if s != syscall.SIGUSR2 {
			t.Errorf("got %v, want SIGUSR2", s)
		}
	case <-time.After(5 * time.Second):
		t.Error("SIGUSR2 was not delivered")
	}
}

// A foreign handler without SA_ONSTACK gets the flag and keeps the rest.
func TestFixAddsOnStackToForeignHandler(t *testing.T) {
	orig, _ := get(int(syscall.SIGUSR2))
	defer set(int(syscall.SIGUSR2), orig)
	goAct := goActions[syscall.SIGUSR1]
	if goAct.handler == 0 {
		t.Fatal("no runtime action recorded for SIGUSR1")
	}
	// Go's own sigreturn trampoline stands in for a C handler: never
	// called here, only installed and read back.
	foreign := sigaction{handler: goAct.restorer, flags: goAct.flags &^ saOnStack, restorer: goAct.restorer, mask: 0}
	if !set(int(syscall.SIGUSR2), foreign) {
		t.Fatal("rt_sigaction failed")
	}
	Fix()
	a, _ := get(int(syscall.SIGUSR2))
	if a.handler != foreign.handler || a.flags != foreign.flags|saOnStack || a.mask != 0 {
		t.Errorf("after Fix: %+v; want %+v with SA_ONSTACK added", a, foreign)
	}
}
