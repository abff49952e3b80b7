package cuda

import (
	"testing"

	"github.com/mstar-dev/mstar/internal/sigstack"
)

// NVRTC's LLVM installs SIGINT, SIGTERM and SIGXFSZ handlers while it
// compiles and puts Go's back without SA_ONSTACK (NVRTC 11.8 here), after
// which a Ctrl-C can kill the process in the runtime. A compile through
// this package leaves every signal action as the runtime set it.
func TestCompileLeavesSignalActions(t *testing.T) {
	n, err := LoadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC on this machine: %v", err)
	}
	if c := sigstack.Changed(); len(c) > 0 {
		t.Fatalf("signal actions changed before the compile: %v", c)
	}
	if _, _, err := n.Compile(`extern "C" __global__ void k(float* p) { p[threadIdx.x] = 1.0f; }`, "k.cu",
		[]string{"--gpu-architecture=compute_80"}, false); err != nil {
		t.Fatal(err)
	}
	if c := sigstack.Changed(); len(c) > 0 {
		t.Errorf("after an NVRTC compile, signal actions differ from the runtime's: %v", c)
	}
}
