package moe

import (
	"regexp"
	"strings"
	"testing"
)

// A kernel launched with pl=1 may start while the kernel before it still
// runs, and so may the kernel after it; both are safe only because every
// kernel of a pass waits (grid_dep_sync) before it touches global memory.
// This holds moe.cu to that: in every __global__ function, nothing but
// __shared__ declarations comes before grid_dep_sync().
func TestEveryKernelWaitsFirst(t *testing.T) {
	src := strings.ReplaceAll(Source, "\\\n", "\n") // macro bodies as plain lines
	heads := regexp.MustCompile(`__global__[^{;]*\{`).FindAllStringIndex(src, -1)
	if len(heads) < 8 {
		t.Fatalf("found %d __global__ functions in moe.cu; the pattern no longer matches its kernels", len(heads))
	}
	shared := regexp.MustCompile(`^__shared__[^;]*;`)
	for _, h := range heads {
		head := src[h[0]:h[1]]
		name := regexp.MustCompile(`(\w+)\s*\(`).FindAllStringSubmatch(head, -1)
		body := src[h[1]:]
		for {
			body = strings.TrimSpace(body)
			if strings.HasPrefix(body, "//") {
				body = body[strings.IndexByte(body, '\n')+1:]
				continue
			}
			if m := shared.FindString(body); m != "" {
				body = body[len(m):]
				continue
			}
			break
		}
		if !strings.HasPrefix(body, "grid_dep_sync();") {
			line := 1 + strings.Count(src[:h[0]], "\n")
			first, _, _ := strings.Cut(body, "\n")
			t.Errorf("moe.cu kernel %v (near line %d) does %q before grid_dep_sync()", name[len(name)-1][1], line, strings.TrimSpace(first))
		}
	}
}

// The dependents of a kernel launch as its blocks exit, never earlier: an
// early griddepcontrol.launch_dependents put the next kernel's blocks beside
// running GEMM blocks and cost up to 22% on the H200 (NOTES, v18).
func TestNoEarlyTrigger(t *testing.T) {
	if strings.Contains(Source, "griddepcontrol.launch_dependents;") {
		t.Error("moe.cu triggers its dependents early (griddepcontrol.launch_dependents); the H200 measured that as a loss")
	}
}
