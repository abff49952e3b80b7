package moe

import (
	"slices"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/reports/results"
)

// Each batch's candidates reach the sink as the batch ends, before the
// comparison runs, so a tune killed in its comparison keeps them; the
// comparison's sweeps follow as the document keeps them (configs=…).
func TestTuneStreamsEachBatch(t *testing.T) {
	opt := tuneOpts(t.TempDir(), []int{2, 4}, []moe.Config{{Kernel: "skinny", NT: 1}, {Kernel: "skinny", NT: 8}}, nil)
	var got []results.Result
	opt.MoE.Sink = func(r results.Result) { got = append(got, r) }
	if _, err := RunMoETune(t.Context(), gpu.NewCPU(), opt); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range got {
		switch r.Name {
		case MoETuneResult:
			order = append(order, "cand M="+r.Params["batch"])
		case MoEResult:
			if r.Params["configs"] == "" {
				t.Errorf("a sweep result without configs=: %v (the raw sweep, not the document's)", r.Params)
			}
			order = append(order, "sweep")
		}
	}
	want := []string{"cand M=2", "cand M=2", "cand M=4", "cand M=4", "sweep"}
	if len(order) < len(want) || !slices.Equal(order[:len(want)], want) {
		t.Errorf("streamed %v; want the candidates of each batch, then the sweeps", order)
	}
}
