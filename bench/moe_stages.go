package bench

import (
	"math"

	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/reports"
)

// MoEStageResult is one kernel of a pass timed alone (--stages): params are
// the batch's plus "stage" (align, gemm1, gemm2, combine).
const (
	MoEStageResult = "moe_stage"
	MoEStageShare  = "pct_of_pass" // the stage's share of the stages' summed medians
)

// StageRow is one stage of one batch, for the command's table.
type StageRow struct {
	Stage, Kernel string
	US            float64 // median µs per call
	HalfWidthPct  float64 // the median's 95% interval, ± % of it
	Share         float64 // % of the summed stage medians
	TFLOPs, GBps  float64 // NaN for align and combine
	PctFloor      float64 // the stage's own floor over its time; NaN when unmeasured
}

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
func localTokens(r moe.Routing) int {
	n := 0
	for m := 0; m < r.M; m++ {
		for j := 0; j < r.K; j++ {
			if r.IDs[m*r.K+j] >= 0 {
				n++
				break
			}
		}
	}
	return n
}

// stageResults turns the per-stage samples of one batch into results and
// table rows. A GEMM stage's floor is max(bytes / d2d, flops / gemm) of its
// own work, so "% of floor" says which GEMM leaves time on the table.
func stageResults(opt MoEOptions, local moe.Shape, m int, r moe.Routing, stages []moe.StageTime) ([]reports.Result, []StageRow) {
	slots, touched, tokens := r.Slots(), r.Touched(local.E), localTokens(r)
	c := opt.Ceilings
	total := 0.0
	for _, st := range stages {
		total += reports.Summarize(st.US).Median
	}
	var res []reports.Result
	var rows []StageRow
	for _, st := range stages {
		sum := reports.Summarize(st.US)
		flops, bytes := stageCost(local, st.Stage, tokens, slots, touched)
		share := math.NaN()
		if total > 0 {
			share = 100 * sum.Median / total
		}
		row := StageRow{Stage: st.Stage, Kernel: st.Kernel, US: sum.Median, Share: share,
			TFLOPs: math.NaN(), GBps: math.NaN(), PctFloor: math.NaN(), HalfWidthPct: sum.HalfWidthPct()}
		params := MoEParams(opt, local, m, "mstar")
		params["stage"] = st.Stage
		metrics := []reports.Metric{
			{Name: MoELatency, Unit: "µs", Better: reports.LowerIsBetter, Samples: st.US},
			{Name: MoEStageShare, Unit: "%", Better: reports.LowerIsBetter, Samples: []float64{row.Share}},
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
				reports.Metric{Name: MoEThroughput, Unit: "TFLOP/s", Better: reports.HigherIsBetter, Samples: per(func(s float64) float64 { return flops / s / 1e12 })},
				reports.Metric{Name: MoEBandwidth, Unit: "GB/s", Better: reports.HigherIsBetter, Samples: per(func(s float64) float64 { return bytes / s / 1e9 })})
			row.TFLOPs, row.GBps = flops/(sum.Median*1e-6)/1e12, bytes/(sum.Median*1e-6)/1e9
			floor := reports.Metric{Name: MoEPctFloor, Unit: "%", Better: reports.HigherIsBetter}
			if bw, _, _ := c.Stream(); c != nil && bw.Measured() && c.GEMM.Measured() {
				floorSec := math.Max(bytes/(bw.Value*1e9), flops/(c.GEMM.Value*1e12))
				floor.Samples = per(func(s float64) float64 { return 100 * floorSec / s })
				row.PctFloor = 100 * floorSec / (sum.Median * 1e-6)
			} else {
				floor.Unmeasured = "needs a bandwidth (read or d2d) and the gemm ceiling"
			}
			metrics = append(metrics, floor)
		}
		res = append(res, reports.Result{Name: MoEStageResult, Params: params, Metrics: metrics})
		rows = append(rows, row)
	}
	return res, rows
}
