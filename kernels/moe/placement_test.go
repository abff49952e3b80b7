package moe

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/kernels/routing"
	"github.com/mstar-dev/mstar/reports/results"
)

// TestCUDAPlacementSpeedProbe asks where the small-M placement levels come
// from (kernels/moe/NOTES.md, Next: mixtral M=2 holds one level for a
// round's samples and jumps between 260 and 281 µs from round to round, each
// round allocating afresh). One configuration, three ways to move things,
// six draws each:
//
//	nothing   the same plan and weights, a new graph each draw
//	plan      a new plan each draw, behind a spacer of another size
//	weights   a new copy of the weights each draw (the old one freed)
//	upload    a new upload of the weights from the host each draw
//	after     a new plan timed after the smaller batches' plans ran (three
//	          draws), in bench moe's sweep order
//
// A device-to-device copy drew slower levels than the first upload
// (NOTES, 2026-12-02); upload tells the copy from the allocation's place,
// and the logged addresses say where each draw landed.
// The level spread of each says which allocation moves the time. It logs
// the numbers and asserts only that every draw computes the same output.
// MSTAR_MOE_PLACEMENT=1 runs it (~1 minute on the H200); skipped without a
// GPU. MSTAR_MOE_PLACEMENT_CONFIG sets the configuration (ParseConfig's
// form, e.g. a tuned file's pick).
func TestCUDAPlacementSpeedProbe(t *testing.T) {
	if os.Getenv("MSTAR_MOE_PLACEMENT") == "" {
		t.Skip("set MSTAR_MOE_PLACEMENT=1 to time the placement draws")
	}
	ctx, k := gpuKernels(t)
	st, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Destroy()
	cells := []struct {
		name string
		s    Shape
		m    int
	}{
		{"mixtral-8x7b", Shape{E: 8, K: 2, H: 4096, I: 14336}, 2},
		{"qwen3-235b-a22b", Shape{E: 128, K: 8, H: 4096, I: 1536}, 4},
	}
	c := tcTable["16x256k128s3w8ov"]
	if v := os.Getenv("MSTAR_MOE_PLACEMENT_CONFIG"); v != "" {
		var err error
		if c, err = ParseConfig(v); err != nil {
			t.Fatalf("MSTAR_MOE_PLACEMENT_CONFIG: %v", err)
		}
	}
	const draws, samples = 6, 20
	for _, cell := range cells {
		l := NewLayer(cell.s, 1)
		w, err := UploadWeights(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		x := RandomInput(cell.m, cell.s.H, 2)
		r := UniformRouting(cell.m, cell.s.E, cell.s.K, 3)
		planFor := func(m int, x []float32, r routing.Routing) *Plan {
			p, err := k.NewPlan(cell.s, m, c)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.SetInputs(x, r); err != nil {
				t.Fatal(err)
			}
			return p
		}
		newPlan := func() *Plan { return planFor(cell.m, x, r) }
		var first []float32
		// draw runs one checked pass (the output must not move with the
		// placement) and returns the median of its timed samples.
		draw := func(p *Plan, w *DeviceWeights) float64 {
			out := poisonedPass(t, p, st, w)
			if first == nil {
				first = out
			} else if !slices.Equal(out, first) {
				t.Fatalf("%s M=%d: a new placement changed the output", cell.name, cell.m)
			}
			us, _, err := p.TimeGraph(st, []*DeviceWeights{w}, samples)
			if err != nil {
				t.Fatal(err)
			}
			return results.Median(us)
		}
		levels := map[string][]float64{}
		addrs := map[string][]string{"nothing": {fmt.Sprintf("%#x/%#x", w.W1, w.W2)}}
		p := newPlan()
		for range draws {
			levels["nothing"] = append(levels["nothing"], draw(p, w))
		}
		var spacers []cuda.DevicePtr
		for i := range draws {
			s, err := ctx.Alloc(int64(1+(i*5)%7) << 20)
			if err != nil {
				t.Fatal(err)
			}
			spacers = append(spacers, s)
			q := newPlan()
			levels["plan"] = append(levels["plan"], draw(q, w))
			if err := q.Free(); err != nil {
				t.Fatal(err)
			}
		}
		cur := w
		for range draws {
			nw, err := w.Clone(cell.s)
			if err != nil {
				t.Fatal(err)
			}
			if cur != w {
				if err := cur.Free(); err != nil {
					t.Fatal(err)
				}
			}
			cur = nw
			levels["weights"] = append(levels["weights"], draw(p, cur))
			addrs["weights"] = append(addrs["weights"], fmt.Sprintf("%#x/%#x", cur.W1, cur.W2))
		}
		if cur != w { // the last copy: the uploads may land where it was
			if err := cur.Free(); err != nil {
				t.Fatal(err)
			}
		}
		cur = w
		for range draws {
			nw, err := UploadWeights(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			if cur != w {
				if err := cur.Free(); err != nil {
					t.Fatal(err)
				}
			}
			cur = nw
			levels["upload"] = append(levels["upload"], draw(p, cur))
			addrs["upload"] = append(addrs["upload"], fmt.Sprintf("%#x/%#x", cur.W1, cur.W2))
		}
		// after: a new plan timed after the smaller batches' plans ran and
		// were timed on the same weights, as a bench moe sweep orders them
		// (the tuner times one batch alone; NOTES, Next).
		for range draws / 2 {
			var kept []*Plan
			for m := 1; m < cell.m; m *= 2 {
				q := planFor(m, RandomInput(m, cell.s.H, 2), UniformRouting(m, cell.s.E, cell.s.K, 3))
				poisonedPass(t, q, st, w)
				if _, _, err := q.TimeGraph(st, []*DeviceWeights{w}, samples); err != nil {
					t.Fatal(err)
				}
				kept = append(kept, q)
			}
			q := newPlan()
			levels["after"] = append(levels["after"], draw(q, w))
			for _, q := range append(kept, q) {
				if err := q.Free(); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, f := range []func() error{p.Free, w.Free} {
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
		if cur != w {
			if err := cur.Free(); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range spacers {
			if err := ctx.Free(s); err != nil {
				t.Fatal(err)
			}
		}
		for _, what := range []string{"nothing", "plan", "weights", "upload", "after"} {
			t.Logf("%s M=%d %v, new %-7s: %s µs (spread %.1f%%)", cell.name, cell.m, c, what, formatLevels(levels[what]), spreadPct(levels[what]))
			if a := addrs[what]; a != nil {
				t.Logf("    W1/W2 at %s", strings.Join(a, " "))
			}
		}
	}
}

func formatLevels(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(s, " ")
}

// spreadPct is (max - min) / min in percent.
func spreadPct(v []float64) float64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return 100 * (hi - lo) / lo
}
