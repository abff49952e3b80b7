package moe

import (
	"fmt"
	"strings"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// CPUKernels names the code paths ForwardCPU takes for routing r over E
// local experts, and how many experts ran through each: experts with three
// tokens or more use AVX512-BF16 where the CPU has it, those with one or two
// (and all of them without AVX512-BF16) AVX2+FMA, and CPUs without AVX2+FMA
// Go loops. A label that names the path that ran tells a reader which
// kernel a time is of.
func CPUKernels(r routing.Routing, E int) string {
	r = r.Computed()
	tokens := make([]int, E)
	for _, id := range r.IDs {
		if id >= 0 && int(id) < E {
			tokens[id]++
		}
	}
	few, many := 0, 0
	for _, n := range tokens {
		switch {
		case n >= 3:
			many++
		case n > 0:
			few++
		}
	}
	path := func(manyTokens bool) string {
		switch {
		case manyTokens && useAVX512BF16:
			return "AVX512-BF16"
		case useAVX2:
			return "AVX2+FMA"
		}
		return "Go loops"
	}
	var parts []string
	if many > 0 {
		parts = append(parts, fmt.Sprintf("%s for %d experts of 3+ tokens", path(true), many))
	}
	if few > 0 {
		parts = append(parts, fmt.Sprintf("%s for %d of 1–2 tokens", path(false), few))
	}
	if len(parts) == 0 {
		return "cpu: no expert had a token"
	}
	return "cpu: " + strings.Join(parts, ", ") + "; float32 sums"
}
