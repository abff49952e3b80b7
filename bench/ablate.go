package bench

import (
	"context"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/reports"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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
	Kernel                                    MoEKernel // nil: the CPU path (needs a Layer: built from Model and Seed)
	KernelSkipped                             string    // why the kernel is not run, when the caller decided so
	Seed                                      uint64

	// Progress, when set, is told what runs and how far along the run is.
	Progress func(what string, done, total int)
}

// MoEKernel computes one fused-MoE layer. The ablation times it under each
// routing. CPUKernel is moe.ForwardCPU; a GPU implementation plugs in here
// (upload x and the routing, run the CUDA path, time it with events).
type MoEKernel interface {
	Name() string
	Shape() moe.Shape
	// Forward computes out[M×H] = MoE(x[M×H]) under r and returns the time
	// the layer took (for a GPU: device time, transfers excluded).
	Forward(x []float32, r moe.Routing, out []float32) (time.Duration, error)
}

// CPUKernel is moe.ForwardCPU, timed by the wall clock.
type CPUKernel struct{ Layer *moe.Layer }

func (k CPUKernel) Name() string     { return "cpu (moe.ForwardCPU, float32, all cores)" }
func (k CPUKernel) Shape() moe.Shape { return k.Layer.Shape }
func (k CPUKernel) Forward(x []float32, r moe.Routing, out []float32) (time.Duration, error) {
	if err := r.Validate(k.Layer.Shape.E); err != nil {
		return 0, err
	}
	t0 := time.Now()
	moe.ForwardCPU(k.Layer, x, r, out)
	return time.Since(t0), nil
}

// CUDAKernel is kernels/moe's CUDA path — the kernels `bench moe` times —
// for the ablation. Each Forward uploads the tokens and the routing, runs
// one pass and downloads its output, then times CUDA-graph replays of the
// layer (alignment included): the duration is device time per call.
type CUDAKernel struct {
	ctx   *cuda.Context
	k     *moe.Kernels
	w     *moe.DeviceWeights
	st    *cuda.Stream
	shape moe.Shape
	plans map[[2]int]*moe.Plan // by tokens, slots per token
	Note  string               // how moe.cu was compiled
}

// NewCUDAKernel compiles the kernels and uploads l's weights to dev.
func NewCUDAKernel(dev gpu.Device, l *moe.Layer) (*CUDAKernel, error) {
	ctx, ok := gpu.CUDAOf(dev)
	if !ok {
		return nil, fmt.Errorf("device %s is not a CUDA device", dev.Info().ID)
	}
	if err := moe.CheckCUDAShape(l.Shape); err != nil {
		return nil, err
	}
	k, err := moe.CompileKernels(ctx, nil)
	if err != nil {
		return nil, err
	}
	c := &CUDAKernel{ctx: ctx, k: k, shape: l.Shape, plans: map[[2]int]*moe.Plan{}}
	c.Note = fmt.Sprintf("moe.cu: %s for %s, cache hit %v", k.Compile.Kind, ctx.Props().Arch(), k.Compile.CacheHit)
	if c.w, err = moe.UploadWeights(ctx, l); err != nil {
		c.Close()
		return nil, fmt.Errorf("uploading weights: %w", err)
	}
	if c.st, err = ctx.NewStream(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *CUDAKernel) Name() string     { return "cuda (kernels/moe, CUDA-graph replay, device time)" }
func (c *CUDAKernel) Shape() moe.Shape { return c.shape }

func (c *CUDAKernel) Forward(x []float32, r moe.Routing, out []float32) (time.Duration, error) {
	key := [2]int{r.M, r.K}
	p, ok := c.plans[key]
	if !ok {
		s := c.shape
		s.K = r.K // expert choice gives tokens more slots than the model's k
		var err error
		if p, err = c.k.NewPlan(s, r.M, moe.Config{}); err != nil {
			return 0, err
		}
		c.plans[key] = p
	}
	if err := p.SetInputs(x, r); err != nil {
		return 0, err
	}
	if err := p.Enqueue(c.st, c.w); err != nil {
		return 0, err
	}
	if err := c.st.Synchronize(); err != nil {
		return 0, err
	}
	o, err := p.Output()
	if err != nil {
		return 0, err
	}
	copy(out, o)
	us, _, err := p.TimeGraph(c.st, []*moe.DeviceWeights{c.w}, 1)
	if err != nil {
		return 0, err
	}
	return time.Duration(us[0] * float64(time.Microsecond)), nil
}

// Close frees the plans, weights, stream and module.
func (c *CUDAKernel) Close() error {
	var errs []error
	for _, p := range c.plans {
		errs = append(errs, p.Free())
	}
	if c.w != nil {
		errs = append(errs, c.w.Free())
	}
	if c.st != nil {
		errs = append(errs, c.st.Destroy())
	}
	errs = append(errs, c.k.Close())
	return errors.Join(errs...)
}

// KernelFor returns the fused-MoE kernel the ablation uses on dev — the
// CUDA path on a CUDA device, moe.ForwardCPU otherwise — with a note to
// show the user (how the kernels were compiled, or why the CPU path stands
// in), and a function that releases it.
//
// A layer whose weights would not fit — in half the host's memory for the
// CPU path (they are generated there in any case), in the device's free
// memory for CUDA — gives no kernel (nil) and a note saying so.
func KernelFor(dev gpu.Device, shape moe.Shape, seed uint64) (MoEKernel, string, func()) {
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
	if !onGPU {
		return CPUKernel{Layer: l}, "", func() {}
	}
	k, err := NewCUDAKernel(dev, l)
	if err != nil {
		return CPUKernel{Layer: l}, "kernel times are the CPU path's: the CUDA fused-MoE path failed: " + err.Error(), func() {}
	}
	return k, k.Note, func() { k.Close() }
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
		if T == 0 || T > o.Trace.Tokens {
			T = o.Trace.Tokens
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
	outputs        map[string][]router.Output // per router, per layer, all tokens
}

// Trace returns a router's routing of every layer as a trace (to replay
// with --trace, or to compare with another implementation). Routings with
// dropped or empty slots (switch, expert-choice) cannot be recorded.
func (a *Ablation) Trace(name string) (*router.Trace, error) {
	outs, ok := a.outputs[name]
	if !ok {
		return nil, fmt.Errorf("router %s did not run", name)
	}
	tr, err := router.TraceFromOutputs(a.Opt.Model.E, outs)
	if err != nil {
		return nil, fmt.Errorf("recording %s: %w", name, err)
	}
	for i := range tr.Layers {
		tr.Layers[i] = a.Runs[0].Layers[i].Layer
	}
	return tr, nil
}

// ErrAblationInput marks errors in the options or the inputs (bad router
// settings, a trace that does not fit): the caller's fault, not the run's.
var ErrAblationInput = errors.New("ablate router: bad input")

func inputErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrAblationInput, fmt.Sprintf(format, a...))
}

// timed wraps a router to accumulate the time its Route calls take.
type timed struct {
	router.Router
	spent *time.Duration
}

func (t timed) Route(in router.Input, st router.State) (router.Output, router.State, error) {
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
		return nil, fmt.Errorf("%w: %v", ErrAblationInput, err)
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
		if T == 0 || T > opt.Trace.Tokens {
			T = opt.Trace.Tokens
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
	a := &Ablation{Opt: opt, outputs: map[string][]router.Output{}}
	a.Opt.Layers, a.Opt.Tokens = L, T

	names := slices.Clone(opt.routers())
	if !slices.Contains(names, opt.baseline()) {
		names = append(names, opt.baseline())
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
		return nil, fmt.Errorf("%w: %v", ErrAblationInput, err)
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
	outputs := make([][]router.Output, 0, len(names)) // [router][layer], all tokens
	kept := names[:0:0]
	for _, name := range names {
		r, err := opt.newRouter(name)
		if err != nil {
			return nil, err
		}
		run := RouterRun{Router: name, Layers: make([]LayerStats, L)}
		spent := make([]time.Duration, L)
		batches := make([][]router.Output, L)
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
				return nil, fmt.Errorf("%w: %v", ErrAblationInput, routeErr)
			}
			a.Warnings = append(a.Warnings, fmt.Sprintf("left out %s: %v", name, routeErr))
			done += L
			continue
		}
		layerOuts := make([]router.Output, L)
		for l := range layerOuts {
			o := concatOutputs(batches[l])
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
		kern = CPUKernel{Layer: moe.NewLayer(moe.Shape{E: E, K: K, H: H, I: m.I}, opt.Seed)}
	}
	if s := kern.Shape(); s.E != E || s.H != H {
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
	ref := toMoE(uniform, 0, n)
	a.uniformTouched = ref.Touched(E)
	from := T - n
	for l := L - kernelLayers; l < L; l++ {
		x := hidden[l][from*H:]
		routings := make([]moe.Routing, len(names))
		for i := range names {
			routings[i] = toMoE(outputs[i][l], from, n)
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
			if _, err := SettleCalls(DefaultSettle, func() (float64, error) {
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
		refMed := reports.Summarize(refMS).Median
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

// toMoE converts tokens from … from+n−1 of a routing for the kernel: empty
// and dropped slots become moe.Dropped (no compute, no contribution).
func toMoE(o router.Output, from, n int) moe.Routing {
	r := moe.Routing{M: n, K: o.K, IDs: make([]int32, n*o.K), Weights: make([]float32, n*o.K)}
	for i := range r.IDs {
		if j := from*o.K + i; o.Live(j) {
			r.IDs[i], r.Weights[i] = o.IDs[j], o.Weights[j]
		} else {
			r.IDs[i] = moe.Dropped
		}
	}
	return r
}

// concatOutputs joins the batches of one layer, padding to the widest K.
func concatOutputs(outs []router.Output) router.Output {
	T, K, drops := 0, 0, false
	for _, o := range outs {
		T += o.T
		K = max(K, o.K)
		drops = drops || o.Dropped != nil
	}
	if len(outs) == 1 {
		return outs[0]
	}
	c := router.NewOutput(T, K)
	if drops {
		c.Dropped = make([]bool, T*K)
	}
	t0 := 0
	for _, o := range outs {
		for t := 0; t < o.T; t++ {
			for j := 0; j < o.K; j++ {
				src, dst := t*o.K+j, (t0+t)*K+j
				c.IDs[dst], c.Weights[dst] = o.IDs[src], o.Weights[src]
				if o.Dropped != nil {
					c.Dropped[dst] = o.Dropped[src]
				}
			}
		}
		t0 += o.T
	}
	return c
}

// column is one metric of the ablation: how to read it from a layer, and
// how it is named, unit and direction in results documents.
type column struct {
	name, unit string
	better     reports.Direction
	header     string
	get        func(ls *LayerStats) []float64 // nil or NaN: not measured for this layer
	why        string                         // why it can be unmeasured
}

func one(v float64) []float64 { return []float64{v} }

var columns = []column{
	{"maxvio", "ratio", reports.LowerIsBetter, "MaxVio", func(ls *LayerStats) []float64 { return one(ls.MaxVio) }, "no tokens were routed"},
	{"balancedness", "ratio", reports.HigherIsBetter, "balance", func(ls *LayerStats) []float64 { return one(ls.Balancedness) }, "no tokens were routed"},
	{"cv", "ratio", reports.LowerIsBetter, "CV", func(ls *LayerStats) []float64 { return one(ls.CV) }, "no tokens were routed"},
	{"entropy", "ratio", reports.HigherIsBetter, "entropy", func(ls *LayerStats) []float64 { return one(ls.Entropy) }, "no tokens were routed"},
	{"assignment_drop", "%", reports.LowerIsBetter, "drop%", func(ls *LayerStats) []float64 { return one(100 * ls.AssignDrop) }, ""},
	{"token_drop", "%", reports.LowerIsBetter, "tok-drop%", func(ls *LayerStats) []float64 { return one(100 * ls.TokenDrop) }, ""},
	{"aux_loss", "ratio", reports.LowerIsBetter, "aux", func(ls *LayerStats) []float64 { return one(ls.AuxLoss) }, "a replayed trace has no logits"},
	{"z_loss", "ratio", reports.LowerIsBetter, "z-loss", func(ls *LayerStats) []float64 { return one(ls.ZLoss) }, "a replayed trace has no logits"},
	{"route_time", "us", reports.LowerIsBetter, "route µs", func(ls *LayerStats) []float64 {
		return one(float64(ls.RouteTime) / float64(time.Microsecond))
	}, ""},
	{"kernel_time", "ms", reports.LowerIsBetter, "kernel ms", func(ls *LayerStats) []float64 { return ls.KernelMS }, "the fused-MoE kernel ran on the last layers only (--kernel-layers)"},
	{"slowdown", "x", reports.LowerIsBetter, "×uniform", func(ls *LayerStats) []float64 { return ls.Slowdown }, "the fused-MoE kernel ran on the last layers only (--kernel-layers)"},
	{"rel_l2", "ratio", reports.LowerIsBetter, "relL2", func(ls *LayerStats) []float64 { return one(ls.RelL2) }, "no baseline output for this layer"},
	{"touched_experts", "experts", reports.LowerIsBetter, "touched", func(ls *LayerStats) []float64 { return one(ls.Touched) }, "the fused-MoE kernel ran on the last layers only (--kernel-layers)"},
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

func (a *Ablation) params(router string) reports.Params {
	o := a.Opt
	p := reports.Params{
		"model":  o.Model.Name,
		"router": router,
		"tokens": strconv.Itoa(o.Tokens),
		"layers": strconv.Itoa(o.Layers),
		"input":  a.inputDesc(),
	}
	if a.KernelTokens > 0 {
		p["kernel_tokens"] = strconv.Itoa(a.KernelTokens)
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
func (a *Ablation) Results() []reports.Result {
	var res []reports.Result
	for _, run := range a.Runs {
		agg := reports.Result{Name: "router", Params: a.params(run.Router), Warnings: run.Warnings}
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
			r := reports.Result{Name: "router/layer", Params: p}
			for _, c := range columns {
				r.Metrics = append(r.Metrics, metric(c, finite(c.get(ls))))
			}
			load := make([]float64, len(ls.Load))
			for e, v := range ls.Load {
				load[e] = float64(v)
			}
			r.Metrics = append(r.Metrics, reports.Metric{Name: "expert_load", Unit: "tokens", Better: reports.LowerIsBetter, Samples: load})
			res = append(res, r)
		}
	}
	if len(a.ReferenceMS) > 0 {
		var all []float64
		for _, v := range a.ReferenceMS {
			all = append(all, v...)
		}
		p := a.params("balanced")
		res = append(res, reports.Result{Name: "router/uniform-reference", Params: p, Metrics: []reports.Metric{
			{Name: "kernel_time", Unit: "ms", Better: reports.LowerIsBetter, Samples: all},
		}})
	}
	return res
}

func metric(c column, samples []float64) reports.Metric {
	m := reports.Metric{Name: c.name, Unit: c.unit, Better: c.better, Samples: samples}
	if len(samples) == 0 {
		m.Unmeasured = c.why
		if m.Unmeasured == "" {
			m.Unmeasured = "not measured"
		}
	}
	return m
}

// WriteTable prints the routers × metrics table: load metrics are means
// over the layers, kernel figures medians over every sample.
func (a *Ablation) WriteTable(w io.Writer) error {
	o := a.Opt
	fmt.Fprintf(w, "# %s: E=%d k=%d H=%d I=%d, %s × %s", o.Model.Name, o.Model.E, o.Model.K, o.Model.H, o.Model.I, plural(o.Layers, "layer"), plural(o.Tokens, "token"))
	if o.Batch > 0 && o.Batch < o.Tokens {
		fmt.Fprintf(w, " in batches of %d", o.Batch)
	}
	fmt.Fprintf(w, "; input %s\n", a.inputDesc())
	if a.KernelTokens > 0 {
		fmt.Fprintf(w, "# kernel: %s; the last %d of %d tokens of the last %s, %s (median); ×uniform = time / time under perfectly uniform routing; relL2 = output difference vs %s\n",
			a.KernelName, a.KernelTokens, o.Tokens, plural(len(a.ReferenceMS), "layer"), plural(o.KernelSamples, "sample"), o.baseline())
	} else if o.KernelSkipped != "" {
		fmt.Fprintln(w, "# kernel: not run: "+o.KernelSkipped)
	} else if o.KernelTokens > 0 && o.KernelLayers > 0 && o.KernelSamples > 0 {
		fmt.Fprintln(w, "# kernel: not run: interrupted before it")
	} else {
		fmt.Fprintf(w, "# kernel: not run (%s)\n", o.kernelOff())
	}
	if a.KernelTokens > 0 {
		fmt.Fprintln(w, "# touched = experts the kernel's tokens use; with few tokens, routing that spreads wider reads more expert weights, so ×uniform < 1 is expected there")
	}
	// report show gives the median of a result's samples, here the layers'
	// values; say which this table shows, so the two can be told apart.
	fmt.Fprintln(w, "# load metrics: mean over layers (report show: median over layers); MaxVio = max/mean load − 1, balance = mean/max, entropy normalised (1 = uniform)")
	// Values first, then one format per column.
	var names []string
	var vals [][]float64  // [row][column]; NaN: none
	var kernelCI []string // per row: the kernel time's 95% interval
	for _, run := range a.Runs {
		names = append(names, run.Router)
		row := make([]float64, len(columns))
		ci := ""
		for j, c := range columns {
			var vs []float64
			for i := range run.Layers {
				vs = append(vs, finite(c.get(&run.Layers[i]))...)
			}
			row[j] = cellValue(c, vs)
			if c.name == "kernel_time" && len(vs) > 0 {
				ci = ciText(vs)
			}
		}
		vals = append(vals, row)
		kernelCI = append(kernelCI, ci)
	}
	if len(a.ReferenceMS) > 0 {
		var all []float64
		for _, v := range a.ReferenceMS {
			all = append(all, v...)
		}
		row := make([]float64, len(columns))
		for j, c := range columns {
			switch c.name {
			case "kernel_time":
				row[j] = reports.Summarize(all).Median
			case "slowdown":
				row[j] = 1
			case "touched_experts":
				row[j] = float64(a.uniformTouched)
			default:
				row[j] = math.NaN()
			}
		}
		names = append(names, "(uniform)")
		vals = append(vals, row)
		kernelCI = append(kernelCI, ciText(all))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := []string{"router"}
	for _, c := range columns {
		hdr = append(hdr, c.header)
		if c.name == "kernel_time" {
			hdr = append(hdr, "±95%")
		}
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
	formats := make([]func(float64) string, len(columns))
	for j, c := range columns {
		col := make([]float64, len(vals))
		for i := range vals {
			col[i] = vals[i][j]
		}
		formats[j] = columnFormat(c, col)
	}
	for i, name := range names {
		row := []string{name}
		for j, v := range vals[i] {
			switch {
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
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, warn := range a.Warnings {
		fmt.Fprintln(w, "# warning: "+warn)
	}
	return nil
}

// ciText is the half-width of the 95% interval of v's median, in % ("±?"
// with fewer than 6 samples: the fewest that give one).
func ciText(v []float64) string {
	p := reports.Summarize(v).HalfWidthPct()
	if math.IsNaN(p) || math.IsInf(p, 0) {
		return "±?"
	}
	return fmt.Sprintf("±%.1f%%", p)
}

// assignDrop is the fraction of o's assigned (token, expert) slots that
// were dropped for capacity; empty slots (-1) were never assigned.
func assignDrop(o router.Output) float64 {
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
		return reports.Summarize(vals).Median
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

// plural is "1 layer", "4 layers".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// heatMax caps the heat map's scale (load / mean load) so that one very
// skewed router does not wash out the others.
const heatMax = 4

// loadCells is one router's layers × experts load relative to the mean, as
// a gonum/plot plotter: cells are filled rectangles drawn a hair wider than
// their pitch, so anti-aliasing leaves no seams between them (the stock
// HeatMap shows hairlines at 128+ experts, and its rasterised form blurs).
type loadCells struct {
	z   [][]float64 // [layer][expert]
	pal []color.Color
	max float64
}

func (g loadCells) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	const overlap = vg.Length(0.6)
	for r, row := range g.z {
		for e, v := range row {
			x0, x1 := trX(float64(e)-0.5), trX(float64(e)+0.5)+overlap
			y0, y1 := trY(float64(r)-0.5), trY(float64(r)+0.5)+overlap
			var pa vg.Path
			pa.Move(vg.Point{X: x0, Y: y0})
			pa.Line(vg.Point{X: x1, Y: y0})
			pa.Line(vg.Point{X: x1, Y: y1})
			pa.Line(vg.Point{X: x0, Y: y1})
			pa.Close()
			col := color.Color(color.White) // hotter than the scale
			if v <= g.max {
				col = g.pal[int(v/g.max*float64(len(g.pal)-1)+0.5)]
			}
			c.SetColor(col)
			c.Fill(pa)
		}
	}
}

func (g loadCells) DataRange() (xmin, xmax, ymin, ymax float64) {
	return -0.5, float64(len(g.z[0])) - 0.5, -0.5, float64(len(g.z)) - 0.5
}

// WriteHeatMap draws each router's expert load as a heat map, layers ×
// experts, one panel per router, on a shared colour scale of load / mean
// load (1 = perfectly balanced; the scale stops at heatMax, hotter experts
// are white), as PNG.
func (a *Ablation) WriteHeatMap(w io.Writer) error {
	if len(a.Runs) == 0 {
		return fmt.Errorf("heat map: no routers ran")
	}
	hi := 1.0
	grids := make([]loadCells, len(a.Runs))
	for i, run := range a.Runs {
		g := loadCells{z: make([][]float64, len(run.Layers))}
		for l, ls := range run.Layers {
			total := 0
			for _, v := range ls.Load {
				total += v
			}
			mean := float64(total) / float64(len(ls.Load))
			g.z[l] = make([]float64, len(ls.Load))
			for e, v := range ls.Load {
				if mean > 0 {
					g.z[l][e] = float64(v) / mean
				}
				hi = math.Max(hi, g.z[l][e])
			}
		}
		grids[i] = g
	}
	hi = math.Min(hi, heatMax)
	cm := moreland.ExtendedBlackBody()
	cm.SetMin(0)
	cm.SetMax(hi)
	pal := cm.Palette(255).Colors()
	cols := min(3, len(a.Runs))
	rows := (len(a.Runs) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for r := range plots {
		plots[r] = make([]*plot.Plot, cols)
	}
	for i, run := range a.Runs {
		g := grids[i]
		g.pal, g.max = pal, hi
		p := plot.New()
		p.Title.Text = run.Router
		p.X.Label.Text = "expert"
		p.Y.Label.Text = "layer"
		p.Y.Tick.Marker = layerTicks(run.Layers)
		p.X.Padding, p.Y.Padding = 0, 0
		p.Add(g)
		plots[i/cols][i%cols] = p
	}
	bar := plot.New()
	bar.Title.Text = fmt.Sprintf("load / mean load (1 = balanced; white: %g or more)", hi)
	bar.HideY()
	bar.X.Padding = 0
	cb := &plotter.ColorBar{ColorMap: moreland.ExtendedBlackBody()}
	cb.ColorMap.SetMin(0)
	cb.ColorMap.SetMax(hi)
	bar.Add(cb)

	barH := vg.Inch
	width := vg.Length(cols) * 5 * vg.Inch
	height := vg.Length(rows)*3.2*vg.Inch + barH
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, t, draw.Crop(dc, 0, 0, barH, 0))
	for r := range plots {
		for c := range plots[r] {
			if plots[r][c] != nil {
				plots[r][c].Draw(canvases[r][c])
			}
		}
	}
	bar.Draw(draw.Crop(dc, width/6, -width/6, vg.Millimeter*2, barH-height))
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// layerTicks labels heat-map rows with the model's layer numbers, at most
// about ten of them.
func layerTicks(layers []LayerStats) plot.ConstantTicks {
	step := max(1, (len(layers)+9)/10)
	var ticks []plot.Tick
	for i, ls := range layers {
		label := ""
		if i%step == 0 {
			label = strconv.Itoa(ls.Layer)
		}
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: label})
	}
	return ticks
}
