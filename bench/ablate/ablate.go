// Package ablate is the ablate router suite: routers × load-balance
// metrics over one workload, the fused-MoE kernel (moe.Runner) timed under
// each routing, and the output difference against a baseline router.
package ablate

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/kernels/routing"
	"github.com/mstar-dev/mstar/reports/results"
)

// AblationSuite is the suite name of `mstar ablate router` results documents.
const AblationSuite = "ablate router"

// DefaultAblationRouters are the routers an ablation compares when none
// are named. A router that cannot route the model (deepseek-v3's 8 groups
// over Mixtral's 8 experts) is left out of a default run with a warning.
var DefaultAblationRouters = []string{
	"softmax-topk", "softmax-topk-norm", "mixtral", "deepseek-v2", "deepseek-v3",
	"deepseek-v3-lossfree", "switch", "expert-choice", "hash", "random", "random-skewed",
	"cross-layer",
}

// TraceRouter is the router name under which an ablation replays its trace.
const TraceRouter = "trace"

// AblationOptions configures a router ablation.
type AblationOptions struct {
	Model    router.Model  // shape and native router
	Routers  []string      // registered names (and TraceRouter); empty: DefaultAblationRouters, or the trace alone
	Config   router.Config // settings for every router; zero fields: the model's (for its own router) or the router's default
	Baseline string        // router whose MoE output the others are compared with; "": the model's router (the trace when replaying)
	Layers   int           // layers routed
	Tokens   int           // tokens per layer
	Batch    int           // tokens per batch: stateful routers adapt from batch to batch; 0: all tokens in one batch
	Workload router.Workload
	Gates    *router.GateSet // nil: random gates
	Trace    *router.Trace   // a recorded routing, replayed under TraceRouter

	// The last KernelTokens tokens of each of the last KernelLayers layers
	// go through the fused-MoE kernel under every routing, KernelSamples
	// times each: the last, where stateful routers have adapted the most.
	// KernelTokens 0 skips the kernel.
	KernelTokens, KernelLayers, KernelSamples int
	Kernel                                    *moe.Runner // nil: the CPU path, its layer built from Model and Seed
	KernelSkipped                             string      // why the kernel is not run, when the caller decided so
	Seed                                      uint64

	// Progress, when set, is told what runs and how far along the run is.
	Progress func(what string, done, total int)

	// Only, when not nil, is the part of Cells whose results the run
	// reports (a --shard's): the baseline still runs, as the others'
	// reference, but reports only where it is in Only.
	Only []string
}

// Cells are the routers an ablation compares, in run order, the baseline
// included: each is one cell of a sharded run.
func (o *AblationOptions) Cells() []string {
	names := slices.Clone(o.routers())
	if !slices.Contains(names, o.baseline()) {
		names = append(names, o.baseline())
	}
	return names
}

// reports says whether the results of router name are the run's to report.
func (o *AblationOptions) reports(name string) bool {
	return o.Only == nil || slices.Contains(o.Only, name)
}

// KernelFor returns the fused-MoE kernel the ablation uses on dev — the
// CUDA path on a CUDA device, moe.ForwardCPU otherwise — with a note to
// show the user (how the kernels were compiled, or why the CPU path stands
// in), and a function that releases it.
//
// A layer whose weights would not fit — in half the host's memory for the
// CPU path (they are generated there in any case), in the device's free
// memory for CUDA — gives no kernel (nil) and a note saying so.
func KernelFor(dev gpu.Device, shape moe.Shape, seed uint64) (*moe.Runner, string, func()) {
	need := shape.WeightBytes()
	if host, big := weightsTooLarge(need); big {
		return nil, fmt.Sprintf("kernel skipped: the layer's weights (%.1f GiB) exceed half of this host's %.1f GiB; --inter shrinks the layer (one GPU's share at tensor parallelism N is I/N)",
			float64(need)/(1<<30), float64(host)/(1<<30)), func() {}
	}
	onGPU := dev != nil && dev.Info().Backend == gpu.CUDA
	if onGPU {
		if free, _, err := dev.MemInfo(); err == nil && need+(1<<30) > free {
			return nil, fmt.Sprintf("kernel skipped: the layer's weights (%.1f GiB) do not fit in the device's %.1f GiB free", float64(need)/(1<<30), float64(free)/(1<<30)), func() {}
		}
	}
	l := moe.NewLayer(shape, seed)
	cpu, _ := moe.NewRunner(nil, l, nil)
	if !onGPU {
		return cpu, "", func() {}
	}
	k, err := moe.NewRunner(dev, l, nil)
	if err != nil {
		return cpu, "kernel times are the CPU path's: the CUDA fused-MoE path failed: " + err.Error(), func() {}
	}
	return k, k.CompileNote, func() { k.Close() }
}

// GPU kernels are fast enough for more tokens and samples than the CPU
// path's defaults (the flags' defaults).
const (
	GPUKernelTokens  = 1024
	GPUKernelSamples = 10
)

// UseKernel makes k the ablation's kernel (nil: none) and, on a GPU, takes
// the GPU's token and sample counts where the user set none.
func (o *AblationOptions) UseKernel(k *moe.Runner, tokensSet, samplesSet bool) {
	o.Kernel = k
	if k == nil || !k.OnGPU() {
		return
	}
	if !tokensSet {
		o.KernelTokens = GPUKernelTokens
	}
	if !samplesSet {
		o.KernelSamples = GPUKernelSamples
	}
}

// weightsTooLarge: KernelFor skips a layer whose weights exceed half the host.
func weightsTooLarge(need int64) (host int64, big bool) {
	host = gpu.HostMemBytes()
	return host, host > 0 && need > host/2
}

// KernelHostBytes is the host memory KernelFor takes for shape's weights
// (built on the host, also for a GPU): none when it would skip the kernel.
func KernelHostBytes(shape moe.Shape) int64 {
	if _, big := weightsTooLarge(shape.WeightBytes()); big {
		return 0
	}
	return shape.WeightBytes()
}

// HostBytes estimates the host memory RunAblation holds at its peak, so a
// workload too large is refused before anything is allocated: per layer a
// gate, hidden states and logits (float32), per router and layer its
// routing (ids, weights, drop flags: once per batch, once joined). Kernel
// weights are KernelHostBytes.
func (o *AblationOptions) HostBytes() int64 {
	l, t, k := o.Dims()
	L, T, K := float64(l), float64(t), float64(k)
	E, H := float64(o.Model.E), float64(o.Model.H)
	routers := float64(len(o.routers()) + 1) // and the baseline
	b := 4*T*H + L*(4*E*H+4*(T*H+T)+4*T*E+routers*2*9*T*K)
	if b >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(b)
}

// Dims are the layers, tokens and top-k the ablation routes: a trace's
// own where the options leave them 0, as RunAblation reads it.
func (o *AblationOptions) Dims() (L, T, K int) {
	L, T, K = o.Layers, o.Tokens, o.Model.K
	if o.Trace != nil {
		if L == 0 {
			L = len(o.Trace.Layers)
		}
		if T == 0 || T > o.Trace.Tokens() {
			T = o.Trace.Tokens()
		}
		K = o.Trace.TopK
	}
	return L, T, K
}

// LayerStats is one router's routing of one layer.
type LayerStats struct {
	Layer int   // the model layer (the gate file's numbering; else 0, 1, ...)
	Load  []int // live assignments per expert, over all tokens
	router.LoadStats
	TokenDrop  float64       // fraction of tokens routed to no expert
	AssignDrop float64       // fraction of (token, expert) assignments dropped for capacity
	AuxLoss    float64       // NaN when the routing had no logits (a replayed trace)
	ZLoss      float64       // NaN likewise
	RouteTime  time.Duration // all batches of the layer
	// Kernel figures, for the last KernelLayers layers only (else nil / NaN).
	KernelMS []float64 // every sample
	Slowdown []float64 // each sample / the median time of perfectly uniform routing
	RelL2    float64   // ‖out − out_baseline‖ / ‖out_baseline‖
	Touched  float64   // distinct experts the kernel's tokens use (their weights are read)
}

// RouterRun is one router's ablation.
type RouterRun struct {
	Router   string
	Layers   []LayerStats
	Warnings []string
}

// Ablation is the outcome of RunAblation.
type Ablation struct {
	Opt          AblationOptions
	Runs         []RouterRun
	ReferenceMS  [][]float64 // per kernel layer: the kernel under perfectly uniform routing
	KernelName   string
	KernelTokens int // tokens actually timed per kernel layer
	Warnings     []string

	uniformTouched int
	outputs        map[string][]routing.Routing // per router, per layer, all tokens
}

// Trace returns a router's routing of every layer as a trace (to replay
// with --trace, or to compare with another implementation). Routings with
// dropped or empty slots (switch, expert-choice) cannot be recorded.
func (a *Ablation) Trace(name string) (*router.Trace, error) {
	outs, ok := a.outputs[name]
	if !ok {
		return nil, fmt.Errorf("router %s did not run", name)
	}
	tr, err := router.TraceFromRoutings(a.Opt.Model.E, outs)
	if err != nil {
		return nil, fmt.Errorf("recording %s: %w", name, err)
	}
	for i := range tr.Layers {
		tr.Layers[i] = a.Runs[0].Layers[i].Layer
	}
	return tr, nil
}

// inputErr is bad input to the ablation (bad router settings, a trace that
// does not fit): the caller's fault, not the run's.
func inputErr(format string, a ...any) error {
	return badinput.Errorf("ablate router: bad input: %s", fmt.Sprintf(format, a...))
}

// timed wraps a router to accumulate the time its Route calls take.
type timed struct {
	router.Router
	spent *time.Duration
}

func (t timed) Route(in router.Input, st router.State) (routing.Routing, router.State, error) {
	t0 := time.Now()
	out, next, err := t.Router.Route(in, st)
	*t.spent += time.Since(t0)
	return out, next, err
}

func (o *AblationOptions) routers() []string {
	if len(o.Routers) > 0 {
		return o.Routers
	}
	if o.Trace != nil {
		return []string{TraceRouter}
	}
	return DefaultAblationRouters
}

func (o *AblationOptions) baseline() string {
	switch {
	case o.Baseline != "":
		return o.Baseline
	case o.Trace != nil:
		return TraceRouter
	}
	return o.Model.Router
}

// configFor merges the ablation's settings with the model's for its own router.
func (o *AblationOptions) configFor(name string) router.Config {
	c := o.Config
	if name == o.Model.Router {
		m := o.Model.Config
		if c.NGroup == 0 {
			c.NGroup = m.NGroup
		}
		if c.TopKGroup == 0 {
			c.TopKGroup = m.TopKGroup
		}
		if c.Scaling == 0 {
			c.Scaling = m.Scaling
		}
		if c.Renormalize == nil {
			c.Renormalize = m.Renormalize
		}
	}
	// deepseek-v2's own default is no group limit (plain greedy, the same
	// routing as softmax-topk); on other models the ablation gives it
	// DeepSeek-V2's 8 groups, keep 3, so its row shows the group limit.
	if name == "deepseek-v2" && name != o.Model.Router && c.NGroup == 0 && c.TopKGroup == 0 && o.Model.E%8 == 0 {
		c.NGroup, c.TopKGroup = 8, 3
	}
	if c.Seed == 0 {
		c.Seed = o.Seed
	}
	return c
}

func (o *AblationOptions) newRouter(name string) (router.Router, error) {
	if name == TraceRouter {
		if o.Trace == nil {
			return nil, inputErr("router %q needs a routing trace", TraceRouter)
		}
		return router.Replay{Trace: o.Trace}, nil
	}
	r, err := router.New(name, o.configFor(name))
	if err != nil {
		return nil, badinput.Errorf("ablate router: bad input: %v", err)
	}
	return r, nil
}

// RunAblation routes a workload through every router and measures what
// each routing does to expert load and to the fused-MoE kernel. A canceled
// ctx stops it between batches and kernel samples: it returns the routers
// and kernel layers done so far (the one in flight left out) with ctx's
// error.
func RunAblation(ctx context.Context, opt AblationOptions) (*Ablation, error) {
	m := opt.Model
	E, K, H := m.E, m.K, m.H
	L, T := opt.Layers, opt.Tokens
	if opt.Trace != nil {
		if opt.Trace.Experts != E {
			return nil, inputErr("the trace routes over %d experts, model %s has %d", opt.Trace.Experts, m.Name, E)
		}
		if L == 0 {
			L = len(opt.Trace.Layers)
		}
		if L > len(opt.Trace.Layers) {
			return nil, inputErr("the trace has %d layers, %d asked", len(opt.Trace.Layers), L)
		}
		if T == 0 || T > opt.Trace.Tokens() {
			T = opt.Trace.Tokens()
		}
		K = opt.Trace.TopK
	}
	switch {
	case E <= 0 || H <= 0 || m.I <= 0:
		return nil, inputErr("model %q: experts, hidden and intermediate sizes must be positive (E=%d H=%d I=%d)", m.Name, E, H, m.I)
	case K <= 0 || K > E:
		return nil, inputErr("top-k %d must be in [1, %d experts]", K, E)
	case L <= 0:
		return nil, inputErr("layers must be positive (got %d)", L)
	case T <= 0:
		return nil, inputErr("tokens must be positive (got %d)", T)
	case opt.Batch < 0:
		return nil, inputErr("batch must be positive (got %d)", opt.Batch)
	case opt.KernelTokens < 0 || opt.KernelLayers < 0 || opt.KernelSamples < 0:
		return nil, inputErr("kernel tokens, layers and samples must not be negative")
	}
	if opt.Gates != nil && len(opt.Gates.Gates) < L {
		return nil, inputErr("%s: %d gate layers, %d asked", opt.Gates.Source, len(opt.Gates.Gates), L)
	}
	B := opt.Batch
	if B == 0 || B > T {
		B = T
	}
	a := &Ablation{Opt: opt, outputs: map[string][]routing.Routing{}}
	a.Opt.Layers, a.Opt.Tokens = L, T

	names := opt.Cells()
	if opt.Only != nil {
		names = slices.DeleteFunc(names, func(n string) bool { return !opt.reports(n) && n != opt.baseline() })
	}
	explicit := len(opt.Routers) > 0

	// The workload: gates, hidden states, logits.
	w := opt.Workload
	w.Tokens = T
	gates := make([][]float32, L)
	biases := make([][]float32, L)
	layerNo := make([]int, L)
	for l := range gates {
		layerNo[l] = l
		if opt.Gates != nil {
			gates[l], biases[l], layerNo[l] = opt.Gates.Gates[l], opt.Gates.Biases[l], opt.Gates.Layers[l]
		} else {
			gates[l] = router.RandomGate(E, H, opt.Seed, l)
		}
	}
	if opt.Trace != nil {
		layerNo = opt.Trace.Layers[:L]
	}
	hidden, _, err := w.Hidden(gates, E, H)
	if err != nil {
		return nil, badinput.Errorf("ablate router: bad input: %v", err)
	}
	logits := make([][]float32, L)
	for l := range logits {
		if err := ctx.Err(); err != nil {
			return a, err
		}
		logits[l] = router.Logits(hidden[l], T, H, gates[l], E)
	}

	kernelLayers := min(opt.KernelLayers, L)
	if opt.KernelTokens == 0 || opt.KernelSamples == 0 {
		kernelLayers = 0
	}
	total := len(names)*L + kernelLayers*(len(names)+1)*opt.KernelSamples
	done := 0
	progress := func(what string) {
		if opt.Progress != nil {
			opt.Progress(what, done, total)
		}
	}

	// Route.
	outputs := make([][]routing.Routing, 0, len(names)) // [router][layer], all tokens
	kept := names[:0:0]
	for _, name := range names {
		r, err := opt.newRouter(name)
		if err != nil {
			return nil, err
		}
		run := RouterRun{Router: name, Layers: make([]LayerStats, L)}
		spent := make([]time.Duration, L)
		batches := make([][]routing.Routing, L)
		var st router.State
		progress("routing: " + name)
		var routeErr error
		for step, off := 0, 0; off < T; step, off = step+1, off+B {
			if err := ctx.Err(); err != nil {
				a.Warnings = append(a.Warnings, fmt.Sprintf("interrupted while routing %s: it, the routers after it and the kernel are left out", name))
				return a, err
			}
			n := min(B, T-off)
			ins := make([]router.Input, L)
			for l := range ins {
				ins[l] = router.Input{Logits: logits[l][off*E : (off+n)*E], T: n, E: E, K: K, Bias: biases[l], Layer: l, Step: step, Offset: off,
					Hidden: hidden[l][off*H : (off+n)*H], Gate: gates[l], H: H}
			}
			// Drive one layer at a time so each layer's Route time is its own.
			for l := range ins {
				outs, next, err := router.Drive(timed{r, &spent[l]}, ins[l:l+1], st)
				if err != nil {
					routeErr = err
					break
				}
				st = next
				batches[l] = append(batches[l], outs[0])
			}
			if routeErr != nil {
				break
			}
		}
		if routeErr != nil {
			if explicit || name == opt.baseline() {
				return nil, badinput.Errorf("ablate router: bad input: %v", routeErr)
			}
			a.Warnings = append(a.Warnings, fmt.Sprintf("left out %s: %v", name, routeErr))
			done += L
			continue
		}
		layerOuts := make([]routing.Routing, L)
		for l := range layerOuts {
			o := routing.Concat(batches[l])
			layerOuts[l] = o
			ls := &run.Layers[l]
			ls.Layer = layerNo[l]
			ls.Load = o.Loads(E)
			ls.LoadStats = router.Load(ls.Load)
			ls.TokenDrop = float64(o.TokenDrops()) / float64(T)
			ls.AssignDrop = assignDrop(o)
			ls.RouteTime = spent[l]
			ls.RelL2 = math.NaN()
			ls.Touched = math.NaN()
			if name == TraceRouter {
				ls.AuxLoss, ls.ZLoss = math.NaN(), math.NaN()
			} else {
				ls.AuxLoss = router.AuxLoss(logits[l], T, E, o)
				ls.ZLoss = router.ZLoss(logits[l], T, E)
			}
			done++
		}
		progress("routing: " + name)
		a.Runs = append(a.Runs, run)
		outputs = append(outputs, layerOuts)
		a.outputs[name] = layerOuts
		kept = append(kept, name)
	}
	names = kept

	if kernelLayers == 0 {
		return a, nil
	}
	kern := opt.Kernel
	if kern == nil {
		if kern, err = moe.NewRunner(nil, moe.NewLayer(moe.Shape{E: E, K: K, H: H, I: m.I}, opt.Seed), nil); err != nil {
			return nil, err
		}
	}
	if s := kern.Layer().Shape; s.E != E || s.H != H {
		return nil, inputErr("kernel shape %v does not match the model (E=%d H=%d)", s, E, H)
	}
	a.KernelName = kern.Name()
	n := min(opt.KernelTokens, T)
	a.KernelTokens = n
	baseIdx := slices.Index(names, opt.baseline())
	uniform, _, err := router.Balanced{}.Route(router.Input{T: n, E: E, K: K}, nil)
	if err != nil {
		return nil, err
	}
	ref := uniform.Tokens(0, n)
	a.uniformTouched = ref.Touched(E)
	from := T - n
	for l := L - kernelLayers; l < L; l++ {
		x := hidden[l][from*H:]
		routings := make([]routing.Routing, len(names))
		for i := range names {
			routings[i] = outputs[i][l].Tokens(from, n) // dropped slots compute nothing
		}
		outs := make([][]float32, len(names))
		for i := range outs {
			outs[i] = make([]float32, n*H)
		}
		scratch := make([]float32, n*H)
		if l == L-kernelLayers {
			// Warm up until the kernel's time settles: first touches of
			// weights and buffers, thread pools, clocks. A fixed single
			// call left the first router's samples 35% slower.
			progress(fmt.Sprintf("kernel: layer %d, warm-up", layerNo[l]))
			if _, err := bench.SettleCalls(bench.DefaultSettle, func() (float64, error) {
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				d, err := kern.Forward(x, ref, scratch)
				return d.Seconds(), err
			}); err != nil {
				if ctx.Err() != nil {
					a.Warnings = append(a.Warnings, fmt.Sprintf("interrupted in the kernel's warm-up (layer %d): the kernel figures are left out", layerNo[l]))
					return a, ctx.Err()
				}
				return nil, fmt.Errorf("fused-MoE kernel: %w", err)
			}
		}
		refMS := make([]float64, 0, opt.KernelSamples)
		samples := make([][]float64, len(names))
		// Interleave routers within each sample so drift hits all alike.
		for s := 0; s < opt.KernelSamples; s++ {
			if err := ctx.Err(); err != nil {
				a.Warnings = append(a.Warnings, fmt.Sprintf("interrupted in the kernel's layer %d: its kernel figures and the later layers' are left out", layerNo[l]))
				return a, err
			}
			progress(fmt.Sprintf("kernel: layer %d, sample %d", layerNo[l], s+1))
			d, err := kern.Forward(x, ref, scratch)
			if err != nil {
				return nil, fmt.Errorf("fused-MoE kernel, uniform routing: %w", err)
			}
			refMS = append(refMS, ms(d))
			done++
			for i := range names {
				d, err := kern.Forward(x, routings[i], outs[i])
				if err != nil {
					return nil, fmt.Errorf("fused-MoE kernel, %s: %w", names[i], err)
				}
				samples[i] = append(samples[i], ms(d))
				done++
				progress(fmt.Sprintf("kernel: layer %d, sample %d", layerNo[l], s+1))
			}
		}
		a.ReferenceMS = append(a.ReferenceMS, refMS)
		refMed := results.Summarize(refMS).Median
		var want []float64
		if baseIdx >= 0 {
			want = make([]float64, n*H)
			for j, v := range outs[baseIdx] {
				want[j] = float64(v)
			}
		}
		for i := range names {
			ls := &a.Runs[i].Layers[l]
			ls.KernelMS = samples[i]
			ls.Touched = float64(routings[i].Touched(E))
			for _, v := range samples[i] {
				ls.Slowdown = append(ls.Slowdown, v/refMed)
			}
			if want != nil {
				ls.RelL2 = moe.RelL2(outs[i], want)
			}
		}
	}
	return a, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// column is one metric of the ablation: how to read it from a layer, and
// how it is named, unit and direction in results documents.
type column struct {
	name, unit string
	better     results.Direction
	header     string
	get        func(ls *LayerStats) []float64 // nil or NaN: not measured for this layer
	why        string                         // why it can be unmeasured
}

func one(v float64) []float64 { return []float64{v} }

var columns = []column{
	{"maxvio", "ratio", results.LowerIsBetter, "MaxVio", func(ls *LayerStats) []float64 { return one(ls.MaxVio) }, "no tokens were routed"},
	{"balancedness", "ratio", results.HigherIsBetter, "balance", func(ls *LayerStats) []float64 { return one(ls.Balancedness) }, "no tokens were routed"},
	{"cv", "ratio", results.LowerIsBetter, "CV", func(ls *LayerStats) []float64 { return one(ls.CV) }, "no tokens were routed"},
	{"entropy", "ratio", results.HigherIsBetter, "entropy", func(ls *LayerStats) []float64 { return one(ls.Entropy) }, "no tokens were routed"},
	{"assignment_drop", "%", results.LowerIsBetter, "drop%", func(ls *LayerStats) []float64 { return one(100 * ls.AssignDrop) }, ""},
	{"token_drop", "%", results.LowerIsBetter, "tok-drop%", func(ls *LayerStats) []float64 { return one(100 * ls.TokenDrop) }, ""},
	{"aux_loss", "ratio", results.LowerIsBetter, "aux", func(ls *LayerStats) []float64 { return one(ls.AuxLoss) }, "a replayed trace has no logits"},
	{"z_loss", "ratio", results.LowerIsBetter, "z-loss", func(ls *LayerStats) []float64 { return one(ls.ZLoss) }, "a replayed trace has no logits"},
	{"route_time", "us", results.LowerIsBetter, "route µs", func(ls *LayerStats) []float64 {
		return one(float64(ls.RouteTime) / float64(time.Microsecond))
	}, ""},
	{"kernel_time", "ms", results.LowerIsBetter, "kernel ms", func(ls *LayerStats) []float64 { return ls.KernelMS }, "the fused-MoE kernel ran on the last layers only (--kernel-layers)"},
	{"slowdown", "x", results.LowerIsBetter, "×uniform", func(ls *LayerStats) []float64 { return ls.Slowdown }, "the fused-MoE kernel ran on the last layers only (--kernel-layers)"},
	{"rel_l2", "ratio", results.LowerIsBetter, "relL2", func(ls *LayerStats) []float64 { return one(ls.RelL2) }, "no baseline output for this layer"},
	{"touched_experts", "experts", results.LowerIsBetter, "touched", func(ls *LayerStats) []float64 { return one(ls.Touched) }, "the fused-MoE kernel ran on the last layers only (--kernel-layers)"},
}

func finite(vs []float64) []float64 {
	var out []float64
	for _, v := range vs {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			out = append(out, v)
		}
	}
	return out
}

func (a *Ablation) params(router string) results.Params {
	o := a.Opt
	p := results.Params{
		"model":  o.Model.Name,
		"router": router,
		"tokens": strconv.Itoa(o.Tokens),
		"layers": strconv.Itoa(o.Layers),
		"input":  a.inputDesc(),
	}
	if a.KernelTokens > 0 {
		p["kernel_tokens"] = strconv.Itoa(a.KernelTokens)
	}
	// What the table's header says; the same for every result of a run.
	p["experts"], p["topk"] = strconv.Itoa(o.Model.E), strconv.Itoa(o.Model.K)
	p["hidden"], p["inter"] = strconv.Itoa(o.Model.H), strconv.Itoa(o.Model.I)
	if o.Batch > 0 && o.Batch < o.Tokens {
		p["batch"] = strconv.Itoa(o.Batch)
	}
	switch {
	case a.KernelTokens > 0:
		p["kernel"], p["baseline"] = a.KernelName, o.baseline()
	case o.KernelSkipped != "":
		p["kernel"] = "not run: " + o.KernelSkipped
	case o.KernelTokens > 0 && o.KernelLayers > 0 && o.KernelSamples > 0:
		p["kernel"] = "not run: interrupted before it"
	default:
		p["kernel"] = "not run (" + o.kernelOff() + ")"
	}
	return p
}

func (a *Ablation) inputDesc() string {
	o := a.Opt
	w := o.Workload
	var s string
	switch {
	case o.Gates != nil:
		s = "gates:" + o.Gates.Source
	default:
		s = "random-gates"
	}
	s += fmt.Sprintf(",zipf:%g,strength:%g,corr:%g", w.Alpha, w.Strength, w.Correlation)
	if o.Trace != nil {
		s += ",trace"
	}
	return s
}

// Results turns the ablation into results: one per router with every
// layer's value as a sample (kernel metrics: every timing), one per router
// and layer ("ablate router/layer", with the expert loads as the metric
// expert_load, sample i = expert i), and the uniform-routing reference.
func (a *Ablation) Results() []results.Result {
	var res []results.Result
	for _, run := range a.Runs {
		if !a.Opt.reports(run.Router) {
			continue // the baseline, run as the reference of another shard's cells
		}
		agg := results.Result{Name: "router", Params: a.params(run.Router), Warnings: run.Warnings}
		for _, c := range columns {
			var samples []float64
			for i := range run.Layers {
				samples = append(samples, finite(c.get(&run.Layers[i]))...)
			}
			agg.Metrics = append(agg.Metrics, metric(c, samples))
		}
		res = append(res, agg)
		for i := range run.Layers {
			ls := &run.Layers[i]
			p := a.params(run.Router)
			p["layer"] = strconv.Itoa(ls.Layer)
			r := results.Result{Name: "router/layer", Params: p}
			for _, c := range columns {
				r.Metrics = append(r.Metrics, metric(c, finite(c.get(ls))))
			}
			load := make([]float64, len(ls.Load))
			for e, v := range ls.Load {
				load[e] = float64(v)
			}
			r.Metrics = append(r.Metrics, results.Metric{Name: "expert_load", Unit: "tokens", Better: results.LowerIsBetter, Samples: load})
			res = append(res, r)
		}
	}
	if len(a.ReferenceMS) > 0 {
		var all []float64
		for _, v := range a.ReferenceMS {
			all = append(all, v...)
		}
		p := a.params("balanced")
		res = append(res, results.Result{Name: "router/uniform-reference", Params: p, Role: results.RoleContext, Metrics: []results.Metric{
			{Name: "kernel_time", Unit: "ms", Better: results.LowerIsBetter, Samples: all},
			{Name: "touched_experts", Unit: "experts", Better: results.LowerIsBetter, Samples: []float64{float64(a.uniformTouched)}},
		}})
	}
	return res
}

func metric(c column, samples []float64) results.Metric {
	m := results.Metric{Name: c.name, Unit: c.unit, Better: c.better, Samples: samples}
	if c.name == "slowdown" {
		m.DerivedFrom = "kernel_time" // kernel time over the uniform reference's
	}
	if len(samples) == 0 {
		m.Unmeasured = c.why
		if m.Unmeasured == "" {
			m.Unmeasured = "not measured"
		}
	}
	return m
}

// Table prints the routers × metrics table of an ablation's document: load
// metrics are means over the layers, kernel figures medians over every
// sample. It reads the results alone, so the run and 'report show --run'
// print the same.
func Table(w io.Writer, d *results.Document) error {
	var routers []results.Result
	var uniform *results.Result
	kernelSamples := 0
	for i, r := range d.Results {
		switch r.Name {
		case "router":
			routers = append(routers, r)
		case "router/uniform-reference":
			uniform = &d.Results[i]
		case "router/layer":
			if m := r.Metric("kernel_time"); m != nil && len(m.Samples) > 0 && kernelSamples == 0 {
				kernelSamples = len(m.Samples)
			}
		}
	}
	var p results.Params
	switch {
	case len(routers) > 0:
		p = routers[0].Params
	case uniform != nil:
		p = uniform.Params
	default:
		comment(w, "ablate router: no router finished (interrupted before the first one?)")
		for _, warn := range d.Warnings {
			comment(w, "warning: "+warn)
		}
		return nil
	}
	atoi := func(k string) int { n, _ := strconv.Atoi(p[k]); return n }
	head := fmt.Sprintf("%s: E=%s k=%s H=%s I=%s, %s × %s", p["model"], p["experts"], p["topk"], p["hidden"], p["inter"],
		units.Plural(atoi("layers"), "layer"), units.Plural(atoi("tokens"), "token"))
	if p["batch"] != "" {
		head += " in batches of " + p["batch"]
	}
	comment(w, head)
	comment(w, "input: "+p["input"])
	// Each table's legend comes above it.
	var kernelLegend []string
	ran := p["kernel_tokens"] != ""
	if ran {
		layers := 0
		if uniform != nil {
			layers = len(uniform.Metric("kernel_time").Samples) / max(kernelSamples, 1)
		}
		kernelLegend = []string{
			"kernel: " + p["kernel"],
			fmt.Sprintf("timed: the last %s of %s tokens of the last %s, %s (median)",
				p["kernel_tokens"], p["tokens"], units.Plural(layers, "layer"), units.Plural(kernelSamples, "sample")),
			"×uniform = time / time under perfectly uniform routing",
			"relL2 = output difference vs " + p["baseline"],
			"touched = experts the kernel's tokens use; with few tokens, routing that spreads wider reads more expert weights, so ×uniform < 1 is expected there",
		}
	} else if k, ok := strings.CutPrefix(p["kernel"], "not run: "); ok {
		kernelLegend = []string{"kernel: not run: " + k}
	} else {
		kernelLegend = []string{"kernel: " + p["kernel"]}
	}
	// report show gives the median of a result's samples, here the layers'
	// values; say which this table shows, so the two can be told apart.
	loadLegend := []string{
		"load metrics: mean over layers (report show: median over layers)",
		"MaxVio = max/mean load − 1, balance = mean/max, entropy normalised (1 = uniform)",
	}
	// Values first, then one format per column.
	var names []string
	var vals [][]float64  // [row][column]; NaN: none
	var kernelCI []string // per row: the kernel time's 95% interval
	for _, r := range routers {
		names = append(names, r.Params["router"])
		row := make([]float64, len(columns))
		ci := ""
		for j, c := range columns {
			var vs []float64
			if m := r.Metric(c.name); m != nil {
				vs = m.Samples
			}
			row[j] = cellValue(c, vs)
			if c.name == "kernel_time" && len(vs) > 0 {
				ci = ciText(vs)
			}
		}
		vals = append(vals, row)
		kernelCI = append(kernelCI, ci)
	}
	if uniform != nil {
		row := make([]float64, len(columns))
		for j, c := range columns {
			switch c.name {
			case "kernel_time":
				row[j] = results.Summarize(uniform.Metric("kernel_time").Samples).Median
			case "slowdown":
				row[j] = 1
			case "touched_experts":
				row[j] = math.NaN()
				if m := uniform.Metric("touched_experts"); m != nil && len(m.Samples) > 0 {
					row[j] = m.Samples[0]
				}
			default:
				row[j] = math.NaN()
			}
		}
		names = append(names, "(uniform)")
		vals = append(vals, row)
		kernelCI = append(kernelCI, ciText(uniform.Metric("kernel_time").Samples))
	}
	formats := make([]func(float64) string, len(columns))
	for j, c := range columns {
		col := make([]float64, len(vals))
		for i := range vals {
			col[i] = vals[i][j]
		}
		formats[j] = columnFormat(c, col)
	}
	// Two tables, load then time and output, each within 100 columns.
	split := slices.IndexFunc(columns, func(c column) bool { return c.name == "route_time" })
	for t, cols := range [][]int{seq(0, split), seq(split, len(columns))} {
		if t > 0 {
			fmt.Fprintln(w, "#")
		}
		for _, l := range [][]string{loadLegend, kernelLegend}[t] {
			comment(w, l)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		hdr := []string{"router"}
		for _, j := range cols {
			hdr = append(hdr, columns[j].header)
			if columns[j].name == "kernel_time" {
				hdr = append(hdr, "±95%")
			}
		}
		fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
		for i, name := range names {
			row := []string{name}
			for _, j := range cols {
				switch v := vals[i][j]; {
				case math.IsNaN(v) && name == "(uniform)":
					row = append(row, "")
				case math.IsNaN(v):
					row = append(row, "-")
				default:
					row = append(row, formats[j](v))
				}
				if columns[j].name == "kernel_time" {
					row = append(row, kernelCI[i])
				}
			}
			if strings.TrimSpace(strings.Join(row[1:], "")) == "" {
				continue // the uniform reference has no load metrics
			}
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	skipped := strings.TrimPrefix(p["kernel"], "not run: ")
	for _, warn := range d.Warnings {
		if warn != skipped { // said in the header
			comment(w, "warning: "+warn)
		}
	}
	return nil
}

// comment writes s as "# " lines within 100 columns.
func comment(w io.Writer, s string) { fmt.Fprintln(w, units.Comment(s)) }

// seq is the integers from lo up to hi.
func seq(lo, hi int) []int {
	s := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

// ciText is the half-width of the 95% interval of v's median, in % ("±?"
// with fewer than 6 samples: the fewest that give one).
func ciText(v []float64) string {
	p := results.Summarize(v).HalfWidthPct()
	if math.IsNaN(p) || math.IsInf(p, 0) {
		return "±?"
	}
	return fmt.Sprintf("±%.1f%%", p)
}

// assignDrop is the fraction of o's assigned (token, expert) slots that
// were dropped for capacity; empty slots (-1) were never assigned.
func assignDrop(o routing.Routing) float64 {
	assigned := 0
	for _, id := range o.IDs {
		if id >= 0 {
			assigned++
		}
	}
	if assigned == 0 {
		return 0
	}
	return float64(o.DroppedSlots()) / float64(assigned)
}

// kernelOff names the flag that turned the kernel off.
func (o *AblationOptions) kernelOff() string {
	var off []string
	for _, f := range []struct {
		name string
		v    int
	}{{"--kernel-tokens", o.KernelTokens}, {"--kernel-layers", o.KernelLayers}, {"--kernel-samples", o.KernelSamples}} {
		if f.v == 0 {
			off = append(off, f.name+" 0")
		}
	}
	if len(off) == 0 {
		return "no kernel"
	}
	return strings.Join(off, ", ")
}

// cellValue is a column's figure for one router: kernel figures the median
// of every sample, the others the mean over layers; NaN when there is none.
func cellValue(c column, vals []float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	if c.name == "kernel_time" || c.name == "slowdown" {
		return results.Summarize(vals).Median
	}
	var v float64
	for _, x := range vals {
		v += x
	}
	return v / float64(len(vals))
}

// columnFormat is one format for every row of a column, so that its
// numbers line up and compare at a glance: relL2 in scientific notation,
// whole counts as integers, the rest with the decimals that give the
// column's largest value four significant digits (at least the load
// metrics' three).
func columnFormat(c column, vals []float64) func(float64) string {
	switch c.name {
	case "rel_l2":
		return func(v float64) string { return strconv.FormatFloat(v, 'e', 2, 64) }
	case "token_drop", "route_time":
		return func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	case "maxvio", "balancedness", "cv", "entropy":
		return func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	}
	whole, big := true, 0.0
	for _, v := range vals {
		if math.IsNaN(v) {
			continue
		}
		whole = whole && v == math.Trunc(v)
		big = math.Max(big, math.Abs(v))
	}
	if whole && c.name == "touched_experts" {
		return func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	}
	dec := 3
	if big > 0 {
		dec = min(max(3-int(math.Floor(math.Log10(big))), 0), 6)
	}
	return func(v float64) string { return strconv.FormatFloat(v, 'f', dec, 64) }
}
