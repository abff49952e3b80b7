package moe

import (
	"math"

	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/routing"
	"github.com/mstar-dev/mstar/reports/results"
)

// MoEStageResult is one kernel of a pass timed alone (--stages): params are
// the batch's plus "stage" (align, gemm1, gemm2, combine).
const (
	MoEStageResult = "moe_stage"
	MoEStageShare  = "pct_of_pass" // the stage's share of the stages' summed medians
)

// stageCost is what a GEMM stage must do at the least: its flops, and the
// bytes of the touched experts' weights it reads plus the activations in
// and out (bf16): gemm1 reads each token's x once (tokens: those with a
// local slot) and writes a row of act per slot; gemm2 reads act and writes
// y per slot. Align and combine return 0, 0: they are bookkeeping.
func stageCost(s moe.Shape, stage string, tokens, slots, touched int) (flops, bytes float64) {
	h, i, sl, t := float64(s.H), float64(s.I), float64(slots), float64(touched)
	switch stage {
	case "gemm1":
		return sl * 2 * h * 2 * i, t*2*i*h*2 + float64(tokens)*h*2 + sl*i*2
	case "gemm2":
		return sl * 2 * i * h, t*i*h*2 + sl*i*2 + sl*h*2
	}
	return 0, 0
}

// localTokens counts the tokens with at least one slot on this rank.
func localTokens(r routing.Routing) int {
	n := 0
	for m := 0; m < r.M; m++ {
		for j := 0; j < r.K; j++ {
			if r.Live(m*r.K + j) {
				n++
				break
			}
		}
	}
	return n
}

// stageResults turns the per-stage samples of one batch into results. A GEMM stage's floor is max(bytes / d2d, flops / gemm) of its
// own work, so "% of floor" says which GEMM leaves time on the table.
func stageResults(opt MoEOptions, local moe.Shape, m int, r routing.Routing, stages []moe.StageTime) []results.Result {
	slots, touched, tokens := r.Slots(), r.Touched(local.E), localTokens(r)
	c := opt.Ceilings
	total := 0.0
	for _, st := range stages {
		total += results.Summarize(st.US).Median
	}
	var res []results.Result
	for _, st := range stages {
		sum := results.Summarize(st.US)
		flops, bytes := stageCost(local, st.Stage, tokens, slots, touched)
		share := math.NaN()
		if total > 0 {
			share = 100 * sum.Median / total
		}
		params := MoEParams(opt, local, m, "mstar")
		params["stage"] = st.Stage
		params["kernel"] = st.Kernel
		metrics := []results.Metric{
			{Name: MoELatency, Unit: "µs", Better: results.LowerIsBetter, Samples: st.US},
			{Name: MoEStageShare, Unit: "%", Better: results.LowerIsBetter, Samples: []float64{share}, DerivedFrom: MoELatency},
		}
		if flops > 0 {
			per := func(f func(sec float64) float64) []float64 {
				out := make([]float64, len(st.US))
				for i, u := range st.US {
					out[i] = f(u * 1e-6)
				}
				return out
			}
			metrics = append(metrics,
				results.Metric{Name: MoEThroughput, Unit: "TFLOP/s", Better: results.HigherIsBetter, Samples: per(func(s float64) float64 { return flops / s / 1e12 }), DerivedFrom: MoELatency},
				results.Metric{Name: MoEBandwidth, Unit: "GB/s", Better: results.HigherIsBetter, Samples: per(func(s float64) float64 { return bytes / s / 1e9 }), DerivedFrom: MoELatency})
			floor := results.Metric{Name: MoEPctFloor, Unit: "%", Better: results.HigherIsBetter, DerivedFrom: MoELatency}
			if bw, _, _ := c.Stream(); c != nil && bw.Measured() && c.GEMM.Measured() {
				floorSec := math.Max(bytes/(bw.Value*1e9), flops/(c.GEMM.Value*1e12))
				floor.Samples = per(func(s float64) float64 { return 100 * floorSec / s })
			} else {
				floor.Unmeasured = "needs a bandwidth (read or d2d) and the gemm ceiling"
			}
			metrics = append(metrics, floor)
		}
		res = append(res, results.Result{Name: MoEStageResult, Params: params, Metrics: metrics})
	}
	return res
}
