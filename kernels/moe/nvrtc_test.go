package moe

import (
	"regexp"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
)

// ptxasLine matches ptxas -v's per-kernel summary.
var (
	ptxasEntry = regexp.MustCompile(`Compiling entry function '(\w+)' for '(\w+)'`)
	ptxasSpill = regexp.MustCompile(`(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads`)
	ptxasRegs  = regexp.MustCompile(`Used (\d+) registers`)
)

// TestNVRTCCompilesEveryConfig compiles moe.cu with NVRTC — the base module
// (alignment, combine, skinny and tiled kernels) and the module of every
// named tc configuration — for compute_80 (PTX) and sm_90 (CUBIN, with
// ptxas's register and spill report logged), wherever an NVRTC library is
// found (a CUDA toolkit, a pip wheel, or NVRTC 11.8 from Debian). A compile
// error fails the test; a machine without NVRTC skips it. sm_90a is not
// tried: NVRTC before 12.0 does not know it (the GPU tests compile for the
// device's own architecture).
func TestNVRTCCompilesEveryConfig(t *testing.T) {
	n, err := cuda.LoadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC to compile moe.cu with: %v", err)
	}
	t.Logf("NVRTC %s at %s", n.Version(), n.Path())
	type module struct {
		name    string
		defines []string
	}
	mods := []module{{name: "base"}}
	for _, c := range append(TCConfigs(), emuSATestConfigs...) {
		mods = append(mods, module{name: c.String(), defines: c.Defines()})
	}
	for _, arch := range []string{"compute_80", "sm_90"} {
		for _, m := range mods {
			t.Run(arch+" "+m.name, func(t *testing.T) {
				t.Parallel()
				opts := append([]string{"--gpu-architecture=" + arch, "-std=c++17"}, m.defines...)
				cubin := strings.HasPrefix(arch, "sm_")
				if cubin {
					opts = append(opts, "--ptxas-options=-v")
				}
				img, log, err := n.Compile(Source, "moe.cu", opts, cubin)
				if err != nil {
					t.Fatalf("%v", err)
				}
				if len(img) == 0 {
					t.Fatal("empty image")
				}
				if strings.Contains(log, "warning") {
					t.Errorf("compiler warnings:\n%s", log)
				}
				if cubin && m.defines != nil {
					logKernels(t, log)
				}
			})
		}
	}
}

// logKernels logs ptxas's registers, stack frame and spills per kernel (the
// GEMMs only): a stack frame without spills is an array put in local memory.
func logKernels(t *testing.T, log string) {
	t.Helper()
	var name string
	var regs, stack, spill string
	flush := func() {
		if strings.Contains(name, "gemm") {
			t.Logf("%s: %s registers, %s bytes stack frame, %s bytes spilled", name, regs, stack, spill)
		}
	}
	for _, line := range strings.Split(log, "\n") {
		if m := ptxasEntry.FindStringSubmatch(line); m != nil {
			flush()
			name, regs, stack, spill = m[1], "?", "?", "?"
		}
		if m := ptxasSpill.FindStringSubmatch(line); m != nil {
			stack, spill = m[1], m[2]
		}
		if m := ptxasRegs.FindStringSubmatch(line); m != nil {
			regs = m[1]
		}
	}
	flush()
}
