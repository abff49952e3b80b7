package gputest

import (
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// A LazyStream's event is reached only when a Sync runs the work before
// it, and a stream waiting on another's event runs that stream's work first.
func TestLazyEventsFollowTheQueue(t *testing.T) {
	d := LazyDevice{Device: gpu.NewCPU()}
	a, _ := d.NewStream()
	b, _ := d.NewStream()
	src, _ := d.Alloc(64)
	dst, _ := d.Alloc(64)
	if err := a.Memset(src, 0, 64, 7); err != nil {
		t.Fatal(err)
	}
	start, _ := a.Record()
	if err := b.WaitEvent(start); err != nil {
		t.Fatal(err)
	}
	if err := b.CopyDtoD(dst, 0, src, 0, 64); err != nil {
		t.Fatal(err)
	}
	end, _ := b.Record()
	if done, _ := start.Done(); done {
		t.Fatal("an event was reached before its stream was synced")
	}
	if _, err := end.Since(start); err == nil {
		t.Fatal("timed events that were not reached")
	}
	if err := b.Sync(); err != nil { // runs a's work first, through the wait
		t.Fatal(err)
	}
	if got := dst.(*gpu.HostBuffer).Bytes()[63]; got != 7 {
		t.Fatalf("copy after the wait read %d, want the memset's 7", got)
	}
	if done, _ := start.Done(); !done {
		t.Fatal("the awaited event was not reached by the waiting stream's sync")
	}
	if d, err := end.Since(start); err != nil || d < 0 {
		t.Fatalf("end since start: %v, %v", d, err)
	}
}
