package moe

import (
	"regexp"
	"strconv"
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
	for _, c := range TCConfigs() {
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

// TestNVRTCCompilesWGForSM90a compiles the module of every wg (wgmma)
// configuration for sm_90a, which only NVRTC 12 and later know (the GPU
// machine's NVRTC 13: run there, it is the compile check of the wgmma, TMA
// and cluster code in the call that times it). It logs ptxas's registers per
// kernel and fails on a wg GEMM with a stack frame: those kernels are built to
// keep everything in registers under the 384-thread bound, and local memory
// (a spill, or an array indexed at run time) is what an edit that pushes
// them past it looks like (v27's idle test did).
func TestNVRTCCompilesWGForSM90a(t *testing.T) {
	n, err := cuda.LoadNVRTC()
	if err != nil {
		t.Skipf("no NVRTC to compile moe.cu with: %v", err)
	}
	if major, _ := strconv.Atoi(strings.Split(n.Version(), ".")[0]); major < 12 {
		t.Skipf("NVRTC %s cannot compile sm_90a (12.0 or later can; the GPU machine's does)", n.Version())
	}
	for _, c := range WGConfigs() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			opts := append([]string{"--gpu-architecture=sm_90a", "-std=c++17", "--ptxas-options=-v"}, c.Defines()...)
			img, log, err := n.Compile(Source, "moe.cu", opts, true)
			if err != nil {
				t.Fatalf("%v", err)
			}
			if len(img) == 0 {
				t.Fatal("empty image")
			}
			for _, k := range logKernels(t, log) {
				if k.stack > 0 {
					t.Errorf("%s: %d bytes stack frame (%d spilled): local memory in a wg GEMM", k.name, k.stack, k.spill)
				}
			}
		})
	}
}

// ptxasKernel is one GEMM kernel's line of ptxas -v.
type ptxasKernel struct {
	name               string
	regs, stack, spill int
}

// logKernels logs ptxas's registers, stack frame and spills per kernel (the
// GEMMs only) and returns them: a stack frame without spills is an array put
// in local memory. A number ptxas did not print reads -1.
func logKernels(t *testing.T, log string) []ptxasKernel {
	t.Helper()
	var name string
	var regs, stack, spill string
	var out []ptxasKernel
	num := func(s string) int {
		v, err := strconv.Atoi(s)
		if err != nil {
			return -1
		}
		return v
	}
	flush := func() {
		if strings.Contains(name, "gemm") {
			t.Logf("%s: %s registers, %s bytes stack frame, %s bytes spilled", name, regs, stack, spill)
			out = append(out, ptxasKernel{name, num(regs), num(stack), num(spill)})
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
	return out
}
