package moe

import (
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/reports/results"
)

// A shortlist keeps the static pick, what the earlier tune did not time,
// and its fastest by pass and by each GEMM; a split in the document ranks
// nothing.
func TestShortlisted(t *testing.T) {
	cfg := func(nt int) moe.Config { return moe.Config{Kernel: "skinny", NT: nt, W1: 4, W2: 4} }
	var cands []moe.Config
	for nt := 1; nt <= 8; nt++ {
		cands = append(cands, cfg(nt))
	}
	rec := func(c string, pass, g1, g2 float64) results.Result {
		r := results.Result{Name: MoETuneResult, Params: results.Params{MoEConfigParam: c}}
		for _, m := range []struct {
			name string
			v    float64
		}{{MoETuneLatency, pass}, {MoETuneGemm1, g1}, {MoETuneGemm2, g2}} {
			if m.v > 0 {
				r.Metrics = append(r.Metrics, results.Metric{Name: m.name, Samples: []float64{m.v, m.v + 1, m.v - 1}})
			}
		}
		return r
	}
	recs := []results.Result{
		rec(cfg(1).String(), 90, 50, 40),                     // the static pick: slowest, kept anyway
		rec(cfg(2).String(), 50, 30, 20),                     // fastest pass
		rec(cfg(3).String(), 60, 20, 40),                     // fastest gemm1
		rec(cfg(4).String(), 70, 45, 10),                     // fastest gemm2
		rec(cfg(5).String(), 80, 40, 30),                     // second everywhere but gemm1: dropped at keep 1
		rec(cfg(6).String(), 0, 0, 0),                        // rejected then: tried again
		rec(cfg(7).String()+"+"+cfg(8).String(), 10, 10, 10), // a split ranks nothing
		// cfg(8): never timed, a new candidate
	}
	names := func(cs []moe.Config) (out []string) {
		for _, c := range cs {
			out = append(out, c.String())
		}
		return out
	}
	got := names(shortlisted(cands, recs, 1))
	want := names([]moe.Config{cfg(1), cfg(2), cfg(3), cfg(4), cfg(6), cfg(7), cfg(8)})
	if !slices.Equal(got, want) {
		t.Errorf("keep 1:\n got %v\nwant %v", got, want)
	}
	if got := shortlisted(cands, recs, 4); len(got) != len(cands) {
		t.Errorf("keep 4 kept %d of %d; want all (cfg 5 is fourth by pass)", len(got), len(cands))
	}
	if got := shortlisted(cands, nil, 1); len(got) != len(cands) {
		t.Errorf("no records kept %d of %d, want all", len(got), len(cands))
	}
}

// tune moe --shortlist: a batch the document holds runs only its shortlist,
// a batch it lacks runs every candidate and says so.
func TestTuneShortlist(t *testing.T) {
	a, b, c := moe.Config{Kernel: "skinny", NT: 1}, moe.Config{Kernel: "skinny", NT: 8}, moe.Config{Kernel: "skinny", NT: 16}
	opt := tuneOpts(t.TempDir(), []int{2, 4}, []moe.Config{a, b, c}, nil)
	rec := func(m int, cfg moe.Config, us float64) results.Result {
		mo := opt.MoE
		local, err := PrepareMoE(&mo)
		if err != nil {
			t.Fatal(err)
		}
		p := MoEParams(mo, local, m, "mstar")
		p[MoEConfigParam] = cfg.String()
		return results.Result{Name: MoETuneResult, Params: p, Metrics: []results.Metric{{Name: MoETuneLatency, Samples: []float64{us}}}}
	}
	// Batch 2 in the document: b was slow there, c fast; the static pick (a) always runs.
	opt.Shortlist = &results.Document{Suite: "tune moe", Env: results.Env{EnvKernelsVersion: "moe.cu-older"},
		Results: []results.Result{rec(2, a, 50), rec(2, b, 90), rec(2, c, 40)}}
	opt.ShortlistKeep = 1
	rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatal(err)
	}
	ran := func(m int) (out []string) {
		for _, o := range rep.Outcomes[m] {
			out = append(out, o.Config.String())
		}
		return out
	}
	if got, want := ran(2), []string{a.String(), c.String()}; !slices.Equal(got, want) {
		t.Errorf("M=2 ran %v, want %v (the static pick and the shortlist's fastest)", got, want)
	}
	if got := ran(4); len(got) != 3 {
		t.Errorf("M=4 ran %v, want all three (not in the document)", got)
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "M=4: not in the shortlist document") }) {
		t.Errorf("no warning that M=4 ran every candidate: %q", rep.Warnings)
	}
	if b := rep.File.Batches["2"]; b.Candidates != 2 {
		t.Errorf("M=2's file entry counts %d candidates, want the 2 that ran", b.Candidates)
	}
}

// A shortlist document of another shape is refused, naming what it holds.
func TestTuneShortlistOfAnotherShape(t *testing.T) {
	opt := tuneOpts(t.TempDir(), []int{2}, []moe.Config{{Kernel: "skinny", NT: 1}}, nil)
	other := opt.MoE
	other.Shape.H = 64
	local, err := PrepareMoE(&other)
	if err != nil {
		t.Fatal(err)
	}
	p := MoEParams(other, local, 2, "mstar")
	p[MoEConfigParam] = "skinny:nt=1"
	opt.Shortlist = &results.Document{Suite: "tune moe", Results: []results.Result{{Name: MoETuneResult, Params: p,
		Metrics: []results.Metric{{Name: MoETuneLatency, Samples: []float64{1}}}}}}
	_, err = RunMoETune(t.Context(), gpu.NewCPU(), opt)
	if err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), "hidden=64") || !strings.Contains(err.Error(), "hidden=32") {
		t.Fatalf("err = %v; want bad input naming both shapes (hidden=32 here, hidden=64 there)", err)
	}
}

// A document of this shape that lacks every batch still to tune (a resume
// past the batches it holds, a batch it never had) is no error: each batch
// runs every candidate and says so.
func TestTuneShortlistWithoutTheseBatches(t *testing.T) {
	a := moe.Config{Kernel: "skinny", NT: 1}
	opt := tuneOpts(t.TempDir(), []int{4}, []moe.Config{a}, nil)
	mo := opt.MoE
	local, err := PrepareMoE(&mo)
	if err != nil {
		t.Fatal(err)
	}
	p := MoEParams(mo, local, 2, "mstar")
	p[MoEConfigParam] = a.String()
	opt.Shortlist = &results.Document{Suite: "tune moe", Results: []results.Result{{Name: MoETuneResult, Params: p,
		Metrics: []results.Metric{{Name: MoETuneLatency, Samples: []float64{1}}}}}}
	rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatalf("a document of this shape without M=4: %v", err)
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "M=4: not in the shortlist document") }) {
		t.Errorf("no warning for M=4: %q", rep.Warnings)
	}
}

// A batch records the kernels of all its candidates, not only of the
// shortlist's: a gv candidate the shortlist drops still counts, so the next
// run with the same shortlist finds the batch current and skips it (it would
// otherwise re-tune it on every run).
func TestTuneShortlistKeepsTheBatchCurrent(t *testing.T) {
	a, gv := moe.Config{Kernel: "skinny", NT: 1}, moe.Config{Kernel: "skinny", NT: 1, GV: 1}
	all := []moe.Config{a, gv}
	opt := tuneOpts(t.TempDir(), []int{2}, all, nil)
	opt.Candidates = func(int) []moe.Config { return all }
	mo := opt.MoE
	local, err := PrepareMoE(&mo)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(cfg moe.Config, us float64) results.Result {
		p := MoEParams(mo, local, 2, "mstar")
		p[MoEConfigParam] = cfg.String()
		return results.Result{Name: MoETuneResult, Params: p, Metrics: []results.Metric{{Name: MoETuneLatency, Samples: []float64{us}}}}
	}
	opt.Shortlist = &results.Document{Suite: "tune moe", Results: []results.Result{rec(a, 40), rec(gv, 90)}}
	opt.ShortlistKeep = 1
	rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rep.Outcomes[2]); n != 1 {
		t.Fatalf("M=2 ran %d candidates, want the shortlist's one", n)
	}
	if got := rep.File.Batches["2"].Kernels; got != moe.GVKernelVersion {
		t.Errorf("M=2 recorded kernels %s, want %s (gv was a candidate, though not run)", got, moe.GVKernelVersion)
	}
	rep, err = RunMoETune(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tuned) != 0 || !slices.Equal(rep.Skipped, []int{2}) {
		t.Errorf("second run with the same shortlist: tuned %v, skipped %v; want M=2 skipped", rep.Tuned, rep.Skipped)
	}
}
