package ablate

import (
	"bytes"
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/kernels/routing"
	"github.com/mstar-dev/mstar/reports/results"
)

// tiny is a model small enough for unit tests: 16 experts, top-2.
var tiny = router.Model{Name: "tiny", E: 16, K: 2, H: 32, I: 16, Router: "softmax-topk-norm"}

func skewed(seed uint64) router.Workload {
	return router.Workload{Alpha: 1.2, Strength: 3, Correlation: 0.5, Seed: seed}
}

func TestAblationSmall(t *testing.T) {
	a, err := RunAblation(t.Context(), AblationOptions{
		Model: tiny, Layers: 3, Tokens: 512, Batch: 128, Workload: skewed(1), Seed: 7,
		KernelTokens: 32, KernelLayers: 1, KernelSamples: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Warnings) != 0 {
		t.Errorf("warnings: %v", a.Warnings)
	}
	byName := map[string]*RouterRun{}
	for i := range a.Runs {
		byName[a.Runs[i].Router] = &a.Runs[i]
	}
	for _, n := range DefaultAblationRouters {
		if byName[n] == nil {
			t.Fatalf("router %s missing from the ablation", n)
		}
	}
	for _, run := range a.Runs {
		if len(run.Layers) != 3 {
			t.Fatalf("%s: %d layers, want 3", run.Router, len(run.Layers))
		}
		k := run.Layers[2]
		if len(k.KernelMS) != 2 || len(k.Slowdown) != 2 {
			t.Errorf("%s: %d kernel samples and %d slowdowns, want 2 each", run.Router, len(k.KernelMS), len(k.Slowdown))
		}
		if run.Layers[1].KernelMS != nil || !math.IsNaN(run.Layers[1].RelL2) {
			t.Errorf("%s: layer 1 has kernel figures, but only the last layer (2) was run", run.Router)
		}
		total := 0
		for _, v := range k.Load {
			total += v
		}
		// Routers without capacity route every token to k experts.
		if run.Router != "switch" && run.Router != "expert-choice" && total != 512*2 {
			t.Errorf("%s: %d assignments, want 1024", run.Router, total)
		}
	}
	// The baseline is the model's router: its own output differs by 0, and
	// mixtral (the same function computed the other way round) by rounding only.
	if v := byName["softmax-topk-norm"].Layers[2].RelL2; v != 0 {
		t.Errorf("baseline relL2 vs itself = %v, want 0", v)
	}
	if v := byName["mixtral"].Layers[2].RelL2; !(v < 1e-5) {
		t.Errorf("mixtral relL2 vs softmax-topk-norm = %v, want < 1e-5 (same function)", v)
	}
	if v := byName["random"].Layers[2].RelL2; !(v > 0.1) {
		t.Errorf("random routing relL2 = %v, want a large difference", v)
	}
	// At the last layer the cross-layer router's state has changed its routing.
	if v := byName["cross-layer"].Layers[2].RelL2; !(v > 0) {
		t.Errorf("cross-layer relL2 at layer 2 = %v, want > 0 (the previous layers mixed in)", v)
	}
	// deepseek-v2 gets DeepSeek-V2's groups on another model (with k=2 and 3
	// groups kept they cannot change a max-scored routing, so check the config).
	if c := a.Opt.configFor("deepseek-v2"); c.NGroup != 8 || c.TopKGroup != 3 {
		t.Errorf("deepseek-v2 config %+v, want n_group 8, topk_group 3", c)
	}
	if c := (&AblationOptions{Model: tiny, Config: router.Config{NGroup: 2, TopKGroup: 1}}).configFor("deepseek-v2"); c.NGroup != 2 {
		t.Errorf("--n-group 2 overridden: %+v", c)
	}
	// Expert choice: C = 128·2/16 = 16 per expert per batch: exactly balanced.
	if v := byName["expert-choice"].Layers[0].MaxVio; v != 0 {
		t.Errorf("expert-choice MaxVio = %v, want 0", v)
	}
	// Switch drops tokens on a skewed workload; routers without capacity never do.
	if v := byName["switch"].Layers[0].TokenDrop; !(v > 0) {
		t.Errorf("switch token drop = %v on a skewed workload, want > 0", v)
	}
	if v := byName["softmax-topk"].Layers[0].TokenDrop; v != 0 {
		t.Errorf("softmax-topk token drop = %v, want 0", v)
	}
	// The Zipf workload is skewed under a learned-style router, not under random.
	if s, r := byName["softmax-topk-norm"].Layers[0].MaxVio, byName["random"].Layers[0].MaxVio; !(s > 2*r) {
		t.Errorf("MaxVio softmax-topk-norm %v vs random %v: the skew did not show", s, r)
	}

	// The results document validates and carries per-layer detail.
	doc := results.NewDocument(AblationSuite, []string{"test"}, results.Env{})
	doc.Results = a.Results()
	var buf bytes.Buffer
	if err := results.Write(&buf, doc); err != nil {
		t.Fatalf("results document: %v", err)
	}
	perLayer, ref := 0, 0
	for _, r := range doc.Results {
		switch r.Name {
		case "router/layer":
			perLayer++
			if m := r.Metric("expert_load"); m == nil || len(m.Samples) != 16 {
				t.Errorf("%s: expert_load missing or not 16 experts", r.Key())
			}
		case "router/uniform-reference":
			ref++
		case "router":
			if m := r.Metric("kernel_time"); !m.Measured() || len(m.Samples) != 2 {
				t.Errorf("%s: kernel_time %+v, want 2 samples", r.Key(), m)
			}
			if m := r.Metric("maxvio"); len(m.Samples) != 3 {
				t.Errorf("%s: maxvio has %d samples, want one per layer (3)", r.Key(), len(m.Samples))
			}
		}
	}
	if perLayer != 3*len(a.Runs) || ref != 1 {
		t.Errorf("%d per-layer results and %d references, want %d and 1", perLayer, ref, 3*len(a.Runs))
	}

	var tab bytes.Buffer
	if err := Table(&tab, &results.Document{Results: a.Results(), Warnings: a.Warnings}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MaxVio", "×uniform", "relL2", "deepseek-v3-lossfree", "(uniform)", "the last 32 of 512 tokens", "3 layers × 512 tokens", "the last 1 layer, 2 samples",
		"mean over layers (report show: median over layers)"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	checkColumnFormats(t, tab.String())

	// The baseline's routing records as a trace and replays to the same loads.
	tr, err := a.Trace("softmax-topk-norm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Trace("switch"); err == nil || !strings.Contains(err.Error(), "dropped or empty slot") {
		t.Errorf("recording switch (drops tokens): %v", err)
	}
	re, err := RunAblation(t.Context(), AblationOptions{Model: tiny, Trace: tr, Workload: skewed(1)})
	if err != nil {
		t.Fatal(err)
	}
	for l := range re.Runs[0].Layers {
		if got, want := re.Runs[0].Layers[l].Load, byName["softmax-topk-norm"].Layers[l].Load; !reflect.DeepEqual(got, want) {
			t.Errorf("layer %d: replayed loads (-want +got):\n-%v\n+%v", l, want, got)
		}
	}
}

// The acceptance check: uniform random routing's MaxVio falls toward 0 as
// the token count grows (the max load's excess shrinks like 1/√tokens),
// while a Zipf-skewed workload's stays large however many tokens are routed.
func TestMaxVioVersusTokens(t *testing.T) {
	sizes := []int{256, 4096, 65536}
	if testing.Short() {
		sizes = []int{256, 4096, 32768}
	}
	var random, zipf []float64
	for _, n := range sizes {
		a, err := RunAblation(t.Context(), AblationOptions{
			Model: tiny, Layers: 1, Tokens: n, Workload: skewed(2), Seed: 3,
			Routers: []string{"random", "softmax-topk-norm"},
		})
		if err != nil {
			t.Fatal(err)
		}
		random = append(random, a.Runs[0].Layers[0].MaxVio)
		zipf = append(zipf, a.Runs[1].Layers[0].MaxVio)
	}
	t.Logf("tokens %v: MaxVio random %.4f, zipf %.4f", sizes, random, zipf)
	for i := 1; i < len(sizes); i++ {
		if !(random[i] < random[i-1]) {
			t.Errorf("random MaxVio did not fall from %d to %d tokens: %v", sizes[i-1], sizes[i], random)
		}
	}
	if last := random[len(random)-1]; !(last < 0.1) {
		t.Errorf("random MaxVio at %d tokens = %.3f, want near 0 (< 0.1)", sizes[len(sizes)-1], last)
	}
	for i, v := range zipf {
		if !(v > 1) {
			t.Errorf("zipf MaxVio at %d tokens = %.3f, want it to stay above 1", sizes[i], v)
		}
	}
	if last, first := zipf[len(zipf)-1], zipf[0]; !(last > 0.5*first) {
		t.Errorf("zipf MaxVio fell from %.3f to %.3f: skew should not average out", first, last)
	}
}

func TestAblationTraceReplay(t *testing.T) {
	// Two layers, 4 tokens each, all on experts 0 and 1 at layer 0.
	outs := []routing.Routing{
		{M: 4, K: 2, IDs: []int32{0, 1, 0, 1, 1, 0, 0, 1}, Weights: []float32{.5, .5, .5, .5, .5, .5, .5, .5}},
		{M: 4, K: 2, IDs: []int32{2, 3, 4, 5, 6, 7, 8, 9}, Weights: []float32{.5, .5, .5, .5, .5, .5, .5, .5}},
	}
	tr, err := router.TraceFromRoutings(16, outs)
	if err != nil {
		t.Fatal(err)
	}
	a, err := RunAblation(t.Context(), AblationOptions{Model: tiny, Trace: tr, Workload: skewed(1), KernelTokens: 4, KernelLayers: 2, KernelSamples: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Runs) != 1 || a.Runs[0].Router != TraceRouter {
		t.Fatalf("runs %v, want the trace alone", a.Runs)
	}
	l0 := a.Runs[0].Layers[0]
	if want := append([]int{4, 4}, make([]int, 14)...); !reflect.DeepEqual(l0.Load, want) {
		t.Errorf("layer 0 load (-want +got):\n-%v\n+%v", want, l0.Load)
	}
	if l0.MaxVio != 7 { // max 4, mean 8/16 → 4/0.5 − 1
		t.Errorf("layer 0 MaxVio = %v, want 7", l0.MaxVio)
	}
	if !math.IsNaN(l0.AuxLoss) {
		t.Errorf("aux loss of a replayed trace = %v, want unmeasured", l0.AuxLoss)
	}
	res := a.Results()
	if m := res[0].Metric("aux_loss"); m.Measured() || !strings.Contains(m.Unmeasured, "trace") {
		t.Errorf("aux_loss metric %+v, want unmeasured with the reason", m)
	}
	if got := a.Runs[0].Layers[1].RelL2; got != 0 {
		t.Errorf("trace vs itself relL2 = %v, want 0", got)
	}

	// A trace over another expert count is bad input.
	other := tiny
	other.E = 32
	if _, err := RunAblation(t.Context(), AblationOptions{Model: other, Trace: tr}); !badinput.Is(err) {
		t.Errorf("trace over 16 experts on a 32-expert model: %v, want bad input", err)
	}
	if _, err := RunAblation(t.Context(), AblationOptions{Model: tiny, Trace: tr, Layers: 3}); err == nil || !strings.Contains(err.Error(), "the trace has 2 layers, 3 asked") {
		t.Errorf("3 layers of a 2-layer trace: %v", err)
	}
}

func TestAblationBadInput(t *testing.T) {
	tests := []struct {
		name string
		opt  AblationOptions
		want string
	}{
		{"groups not dividing experts", AblationOptions{Model: tiny, Layers: 1, Tokens: 8, Routers: []string{"deepseek-v3"}, Config: router.Config{NGroup: 3, TopKGroup: 1}},
			"n_group 3 does not divide the 16 experts"},
		{"k above experts", AblationOptions{Model: router.Model{Name: "x", E: 4, K: 5, H: 8, I: 8, Router: "softmax-topk"}, Layers: 1, Tokens: 8},
			"top-k 5 must be in [1, 4 experts]"},
		{"unknown router", AblationOptions{Model: tiny, Layers: 1, Tokens: 8, Routers: []string{"nope"}}, `unknown router "nope"`},
		{"trace router without a trace", AblationOptions{Model: tiny, Layers: 1, Tokens: 8, Routers: []string{"trace"}}, "needs a routing trace"},
		{"gate file with too few layers", AblationOptions{Model: tiny, Layers: 2, Tokens: 8, Gates: &router.GateSet{Source: "g.safetensors", Layers: []int{0}, Gates: [][]float32{make([]float32, 16*32)}, Biases: [][]float32{nil}}},
			"g.safetensors: 1 gate layers, 2 asked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Workload = skewed(1)
			_, err := RunAblation(t.Context(), tc.opt)
			if !badinput.Is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want bad input containing %q", err, tc.want)
			}
		})
	}
	// In a default run, a router that cannot route the model is left out with a warning.
	mix := router.Model{Name: "mixtral-like", E: 8, K: 2, H: 16, I: 8, Router: "mixtral"}
	a, err := RunAblation(t.Context(), AblationOptions{Model: mix, Layers: 1, Tokens: 64, Workload: skewed(1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Warnings) == 0 || !strings.Contains(strings.Join(a.Warnings, "\n"), "left out deepseek-v3: ") {
		t.Errorf("warnings %v, want deepseek-v3 left out (8 groups of 1 expert)", a.Warnings)
	}
}

func TestAblationUsesGateFileLayers(t *testing.T) {
	gs := &router.GateSet{Source: "mem", Layers: []int{3, 7}}
	for l := 0; l < 2; l++ {
		gs.Gates = append(gs.Gates, router.RandomGate(16, 32, 11, l))
		bias := make([]float32, 16)
		bias[5] = 10 // deepseek-v3 then always picks expert 5
		gs.Biases = append(gs.Biases, bias)
	}
	a, err := RunAblation(t.Context(), AblationOptions{Model: tiny, Layers: 2, Tokens: 64, Gates: gs, Workload: skewed(1),
		Routers: []string{"deepseek-v3"}, Config: router.Config{NGroup: 1, TopKGroup: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// The baseline (the model's router) is added to the run.
	if len(a.Runs) != 2 || a.Runs[1].Router != "softmax-topk-norm" {
		t.Fatalf("runs %d, want deepseek-v3 and the baseline", len(a.Runs))
	}
	for i, ls := range a.Runs[0].Layers {
		if ls.Layer != gs.Layers[i] {
			t.Errorf("layer %d is numbered %d, want the file's %d", i, ls.Layer, gs.Layers[i])
		}
		if ls.Load[5] != 64 {
			t.Errorf("layer %d: expert 5 got %d of 64 tokens; the file's bias was not used", ls.Layer, ls.Load[5])
		}
	}
}

// checkColumnFormats checks that every number of a column of the ablation
// table has the same form: the same decimals, or scientific notation.
func checkColumnFormats(t *testing.T, tab string) {
	t.Helper()
	form := func(cell string) string {
		if i := strings.IndexAny(cell, "eE"); i >= 0 {
			return "e" + strconv.Itoa(i-strings.IndexByte(cell, '.')-1)
		}
		if i := strings.IndexByte(cell, '.'); i >= 0 {
			return strconv.Itoa(len(cell) - i - 1)
		}
		return "0"
	}
	// Two tables: the load metrics, then from the route time on.
	split := slices.IndexFunc(columns, func(c column) bool { return c.name == "route_time" })
	forms := map[int]map[string]string{} // column -> form -> a cell
	rows, table := 0, -1
	for _, line := range strings.Split(tab, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "router" {
			table++
			continue
		}
		first, n := 0, split // the table's first column and column count
		if table == 1 {
			first, n = split, len(columns)-split+1 // and the kernel time's interval
		}
		if table < 0 || len(f) != n+1 || strings.HasPrefix(line, "#") {
			continue
		}
		if table == 1 {
			// The kernel time's interval has a column of its own, after it.
			k := slices.IndexFunc(columns, func(c column) bool { return c.name == "kernel_time" }) - split + 2
			if ci := f[k]; !strings.HasPrefix(ci, "±") {
				t.Errorf("kernel time's interval column holds %q", ci)
			}
			f = append(f[:k], f[k+1:]...)
		}
		rows++
		for i, cell := range f[1:] {
			j := first + i
			if cell == "-" {
				continue
			}
			if forms[j] == nil {
				forms[j] = map[string]string{}
			}
			forms[j][form(cell)] = cell
		}
	}
	if rows < 2 || table != 1 {
		t.Fatalf("found %d rows in %d tables, want two tables, in:\n%s", rows, table+1, tab)
	}
	for j, fs := range forms {
		if len(fs) > 1 {
			t.Errorf("column %s mixes number formats %v:\n%s", columns[j].header, fs, tab)
		}
	}
}

// An interrupt keeps the routers and kernel layers done and leaves out the
// one in flight; what is kept still makes valid results.
func TestAblationInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name, at      string
		routers       int // routers kept
		kernelLayers  int // kernel layers kept
		lastHasKernel bool
	}{
		{"while routing the second router", "routing: " + DefaultAblationRouters[1], 1, 0, false},
		{"in the kernel's second layer", "kernel: layer 2, sample 1", len(DefaultAblationRouters), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			a, err := RunAblation(ctx, AblationOptions{
				Model: tiny, Layers: 3, Tokens: 256, Batch: 128, Workload: skewed(1), Seed: 7,
				KernelTokens: 16, KernelLayers: 2, KernelSamples: 2,
				Progress: func(what string, done, total int) {
					if what == tc.at {
						cancel()
					}
				},
			})
			if !errors.Is(err, context.Canceled) || a == nil {
				t.Fatalf("err %v; want the partial ablation and context.Canceled", err)
			}
			if len(a.Warnings) != 1 || !strings.Contains(a.Warnings[0], "interrupted") {
				t.Errorf("warnings %q: want one saying what the interrupt left out", a.Warnings)
			}
			if len(a.Runs) != tc.routers || len(a.ReferenceMS) != tc.kernelLayers {
				t.Fatalf("%d routers and %d kernel layers kept, want %d and %d", len(a.Runs), len(a.ReferenceMS), tc.routers, tc.kernelLayers)
			}
			if a.Runs[0].Router != DefaultAblationRouters[0] || len(a.Runs[0].Layers) != 3 {
				t.Errorf("first run %s with %d layers, want %s with 3", a.Runs[0].Router, len(a.Runs[0].Layers), DefaultAblationRouters[0])
			}
			if got := a.Runs[0].Layers[2].KernelMS != nil; got != tc.lastHasKernel {
				t.Errorf("last layer has kernel samples: %v, want %v (its layer was in flight or never reached)", got, tc.lastHasKernel)
			}
			if tc.kernelLayers > 0 && len(a.Runs[0].Layers[1].KernelMS) != 2 {
				t.Errorf("layer 1 (done before the interrupt) has %d kernel samples, want 2", len(a.Runs[0].Layers[1].KernelMS))
			}
			doc := results.NewDocument(AblationSuite, nil, results.Env{})
			doc.Results = a.Results()
			doc.Finish()
			if err := doc.Validate(); err != nil {
				t.Errorf("partial ablation makes an invalid document: %v", err)
			}
		})
	}
}

// drop% counts dropped (token, expert) assignments, not only tokens left
// with no expert: a switch router that drops one of a token's two experts
// dropped an assignment (it read 0.0 while ~2.4% were dropped).
func TestAssignDropCountsAssignments(t *testing.T) {
	o := routing.Routing{M: 3, K: 2, IDs: []int32{0, 1, 2, 3, 1, -1}, Weights: make([]float32, 6),
		Dropped: []bool{false, true, false, false, false, false}}
	if got := assignDrop(o); math.Abs(got-1.0/5) > 1e-12 {
		t.Errorf("assignDrop = %v, want 1/5 (one of five assigned slots dropped; the empty slot is not an assignment)", got)
	}
	if o.TokenDrops() != 0 {
		t.Errorf("no token lost every expert, TokenDrops = %d", o.TokenDrops())
	}
	if got := assignDrop(routing.Routing{M: 1, K: 1, IDs: []int32{-1}, Weights: []float32{0}}); got != 0 {
		t.Errorf("no assignment at all: %v", got)
	}
}

// A shard (Only) reports its routers alone, and still compares them with
// the baseline it does not own: their rel_l2 equals the whole run's.
func TestAblationOnlyKeepsTheBaseline(t *testing.T) {
	opt := AblationOptions{Model: tiny, Routers: []string{"hash", "random"}, Baseline: "softmax-topk", Layers: 1, Tokens: 128, Workload: skewed(1), Seed: 3,
		KernelTokens: 8, KernelLayers: 1, KernelSamples: 1}
	if got := opt.Cells(); !slices.Equal(got, []string{"hash", "random", "softmax-topk"}) {
		t.Fatalf("cells %v, want the routers then the baseline", got)
	}
	whole, err := RunAblation(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.Only = []string{"random"}
	part, err := RunAblation(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	relL2 := func(a *Ablation, router string) (float64, bool) {
		for _, r := range a.Results() {
			if r.Name == "router" && r.Params["router"] == router {
				m := r.Metric("rel_l2")
				return results.Median(m.Samples), m.Measured()
			}
		}
		return 0, false
	}
	for _, r := range part.Results() {
		if r.Name != "router/uniform-reference" && r.Params["router"] != "random" {
			t.Errorf("the shard of router random reports %s", r.Key())
		}
	}
	w, ok1 := relL2(whole, "random")
	p, ok2 := relL2(part, "random")
	if !ok1 || !ok2 || w != p || w == 0 {
		t.Errorf("random's rel_l2 against the baseline: whole %v (%v), shard %v (%v); want equal, measured and nonzero", w, ok1, p, ok2)
	}
}
