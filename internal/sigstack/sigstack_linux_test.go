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

// A handler installed without SA_ONSTACK (as a C library would: here Go's
// own handler, copied onto SIGUSR2 without the flag) gets it back, and the
// signal is then delivered to Go as usual.
func TestFixAddsOnStack(t *testing.T) {
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
	broken.flags &^= saOnStack
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
	if a, _ := get(int(syscall.SIGUSR2)); a.flags&saOnStack == 0 || a.handler != goAct.handler {
		t.Errorf("SIGUSR2 after Fix: %+v; want Go's handler with SA_ONSTACK", a)
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
