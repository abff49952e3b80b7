package moe

import (
	"cmp"
	"slices"
	"strings"

	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/reports/results"
)

// tune moe --shortlist: after a kernel change, time per batch only what an
// earlier tune of the same shape found close to the best, and what is new.

// candidateRecords are the moe_tune records of batch m in doc, a tune
// document of the same shape, sharding, routing and seed (any kernels).
func candidateRecords(doc *results.Document, mo MoEOptions, local moe.Shape, m int) []results.Result {
	want := results.Result{Name: MoETuneResult, Params: MoEParams(mo, local, m, "mstar")}.Key()
	var out []results.Result
	for _, r := range doc.Results {
		if r.Name == MoETuneResult && (results.Result{Name: r.Name, Params: paramsWithout(r.Params, MoEConfigParam)}).Key() == want {
			out = append(out, r)
		}
	}
	return out
}

// shapeKey is a run's parameters less the batch, the configuration and
// the implementation ("k1=v1/k2=v2", sorted): what a shortlist document
// must share with the run.
func shapeKey(p results.Params) string {
	return strings.TrimPrefix(results.Result{Params: paramsWithout(p, "batch", MoEConfigParam, "impl")}.Key(), "/")
}

// tunedShapesIn are the shape keys of doc's candidates, in order.
func tunedShapesIn(doc *results.Document) []string {
	var seen []string
	for _, r := range doc.Results {
		if k := shapeKey(r.Params); r.Name == MoETuneResult && !slices.Contains(seen, k) {
			seen = append(seen, k)
		}
	}
	return seen
}

// describeShapes says what tunedShapesIn found, for an error message.
func describeShapes(keys []string) string {
	if len(keys) == 0 {
		return "no tune candidates at all"
	}
	return strings.Join(keys, "; ")
}

// shortlisted keeps, in their order, the candidates worth timing again
// after a kernel change: cands[0] (the static pick, the baseline), every
// candidate recs did not time (new, or rejected then), and the keep
// fastest of the timed ones by pass time, by gemm1 alone and by gemm2
// alone (the split is built from the last two; the static pick is ranked
// like the others, so it may take one of the places). A split or launch
// variant in recs ranks nothing: the tuner builds those again from what
// it times.
func shortlisted(cands []moe.Config, recs []results.Result, keep int) []moe.Config {
	if keep <= 0 {
		keep = DefaultShortlistKeep
	}
	timed := map[string][3]float64{} // config → medians: pass, gemm1, gemm2 (0: none)
	for _, r := range recs {
		var t [3]float64
		for i, name := range []string{MoETuneLatency, MoETuneGemm1, MoETuneGemm2} {
			if mt := r.Metric(name); mt != nil && mt.Measured() {
				t[i] = results.Median(mt.Samples)
			}
		}
		if t[0] > 0 {
			timed[r.Params[MoEConfigParam]] = t
		}
	}
	keepSet := map[string]bool{}
	for i := range 3 {
		var ranked []string
		for _, c := range cands {
			if t, ok := timed[c.String()]; ok && t[i] > 0 {
				ranked = append(ranked, c.String())
			}
		}
		slices.SortStableFunc(ranked, func(a, b string) int { return cmp.Compare(timed[a][i], timed[b][i]) })
		for _, c := range ranked[:min(keep, len(ranked))] {
			keepSet[c] = true
		}
	}
	var out []moe.Config
	for i, c := range cands {
		if _, wasTimed := timed[c.String()]; i == 0 || !wasTimed || keepSet[c.String()] {
			out = append(out, c)
		}
	}
	return out
}
