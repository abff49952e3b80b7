package moe

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/kernels/routing"
)

// Runner runs one fused-MoE layer for a suite, on the CUDA path when the
// device is a CUDA device and on ForwardCPU otherwise: it checks (a pass on
// NaN-poisoned buffers whose output the caller compares), times (CUDA-graph
// replays in device time, or the wall clock on the CPU), rotates weight
// copies so a timed batch reads its experts from memory and not from L2,
// and frees everything in Close. bench moe and ablate router both run the
// kernels through it.
type Runner struct {
	layer *Layer

	// CUDA only.
	ctx    *cuda.Context
	k      *Kernels
	copies []*DeviceWeights
	st     *cuda.Stream
	l2     int64
	plans  map[[2]int]*Plan // Forward's plans, by tokens and slots per token

	// CompileNote says how moe.cu was compiled; KernelsID names the source
	// and the compile (both empty on the CPU).
	CompileNote, KernelsID string

	// WarmUp, when set, warms Run's timing up until it settles (the suite
	// passes bench.SettleCalls with its limits): it is given one timed call,
	// a graph replay's device time on CUDA or a pass's wall time on the CPU,
	// in seconds. Unset: one untimed replay on CUDA, none beyond the checked
	// pass on the CPU.
	WarmUp func(call func() (float64, error)) error

	// MinCopies, when above 1, makes every timing rotate through at least
	// that many copies of the weights (as device memory allows), so that a
	// sample averages as many placements: at small M one configuration has
	// read up to ~4% apart between two copies of the same weights in one
	// process (kernels/moe/NOTES.md). 0 or 1: only the copies the L2 needs.
	MinCopies int
}

// NewRunner compiles the kernels (with defines, e.g. a custom tile) and
// uploads l's weights when dev is a CUDA device; on any other device (or
// nil) it runs ForwardCPU.
func NewRunner(dev gpu.Device, l *Layer, defines []string) (*Runner, error) {
	g := &Runner{layer: l}
	if dev == nil {
		return g, nil
	}
	ctx, ok := gpu.CUDAOf(dev)
	if !ok {
		return g, nil
	}
	if err := CheckCUDAShape(l.Shape); err != nil {
		return nil, err
	}
	k, err := CompileKernels(ctx, defines)
	if err != nil {
		return nil, err
	}
	g.ctx, g.k, g.l2, g.plans = ctx, k, ctx.Props().L2Bytes, map[[2]int]*Plan{}
	sum := sha256.Sum256([]byte(Source))
	g.KernelsID = fmt.Sprintf("moe.cu %x %s %s", sum[:6], k.Compile.Kind, ctx.Props().Arch())
	g.CompileNote = fmt.Sprintf("moe.cu: %s for %s, cache hit %v, %.2f s", k.Compile.Kind, ctx.Props().Arch(), k.Compile.CacheHit, k.Compile.Seconds)
	w, err := UploadWeights(ctx, l)
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("uploading weights: %w", err)
	}
	g.copies = []*DeviceWeights{w}
	if g.st, err = ctx.NewStream(); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// Copies is how many weight copies the runner holds (0 on the CPU).
func (g *Runner) Copies() int { return len(g.copies) }

// ProgrammaticLaunch says whether configurations with pl=1 can run here.
func (g *Runner) ProgrammaticLaunch() bool { return g.ctx != nil && g.ctx.ProgrammaticLaunch() }

// OnGPU reports whether the runner runs the CUDA path.
func (g *Runner) OnGPU() bool { return g.k != nil }

// Layer is the layer the runner computes (its weights on the host).
func (g *Runner) Layer() *Layer { return g.layer }

// Name says which path runs and how it is timed.
func (g *Runner) Name() string {
	if g.OnGPU() {
		return "cuda (kernels/moe, CUDA-graph replay, device time)"
	}
	return "cpu (moe.ForwardCPU, float32, all cores)"
}

// Close frees the plans, weight copies, stream and module.
func (g *Runner) Close() error {
	if !g.OnGPU() {
		return nil
	}
	var errs []error
	for _, p := range g.plans {
		errs = append(errs, p.Free())
	}
	g.plans = nil
	for _, c := range g.copies {
		errs = append(errs, c.Free())
	}
	g.copies = nil
	if g.st != nil {
		errs = append(errs, g.st.Destroy())
		g.st = nil
	}
	errs = append(errs, g.k.Close())
	return errors.Join(errs...)
}

// Compile compiles (or finds in the cache) the module of configuration c.
func (g *Runner) Compile(c Config) (*cuda.CompileResult, error) {
	if !g.OnGPU() {
		return nil, errors.New("no CUDA device: configurations are CUDA kernels")
	}
	return g.k.Module(c)
}

// Pass is one checked and timed batch.
type Pass struct {
	Out    []float32   // the checked pass's output, M×H
	US     []float64   // µs per call, one per sample
	Stages []StageTime // each kernel timed alone, when asked for
	Note   string      // what ran: the configuration, calls per graph, weight copies
}

// Run makes a checked pass with configuration c (the empty Config: the
// static table's pick) and times it with samples samples; with stages, each
// of its kernels is then timed alone as well. A canceled ctx stops it
// between those steps with ctx's error.
func (g *Runner) Run(ctx context.Context, x []float32, r routing.Routing, samples int, c Config, stages bool) (Pass, error) {
	if !g.OnGPU() {
		return g.runCPU(ctx, x, r, samples, stages)
	}
	p, out, err := g.CheckedPass(x, r, c)
	if err != nil {
		return Pass{}, err
	}
	defer p.Free()
	if err := ctx.Err(); err != nil {
		return Pass{}, err
	}
	us, note, err := g.Time(p, r, samples)
	if err != nil {
		return Pass{}, err
	}
	res := Pass{Out: out, US: us, Note: note}
	if stages {
		if err := ctx.Err(); err != nil {
			return Pass{}, err
		}
		if res.Stages, err = g.Stages(p, r, samples); err != nil {
			return Pass{}, err
		}
	}
	return res, nil
}

// CheckedPass makes a plan for configuration c and runs one pass on
// poisoned buffers; the caller frees the plan. r.K may exceed the layer's
// k (expert choice gives tokens more slots).
func (g *Runner) CheckedPass(x []float32, r routing.Routing, c Config) (*Plan, []float32, error) {
	s := g.layer.Shape
	s.K = r.K
	p, err := g.k.NewPlan(s, r.M, c)
	if err != nil {
		return nil, nil, err
	}
	p.WarmUp = g.WarmUp
	out, err := g.pass(p, x, r, true)
	if err != nil {
		p.Free()
		return nil, nil, err
	}
	return p, out, nil
}

func (g *Runner) pass(p *Plan, x []float32, r routing.Routing, poison bool) ([]float32, error) {
	if err := p.SetInputs(x, r); err != nil {
		return nil, err
	}
	if poison {
		if err := p.Poison(g.st); err != nil {
			return nil, err
		}
	}
	if err := p.Enqueue(g.st, g.copies[0]); err != nil {
		return nil, err
	}
	if err := g.st.Synchronize(); err != nil {
		return nil, fmt.Errorf("checked pass: %w", err)
	}
	return p.Output()
}

// Time times a plan by CUDA-graph replay, rotating weight copies as the
// batch needs; the note says what ran.
func (g *Runner) Time(p *Plan, r routing.Routing, samples int) ([]float64, string, error) {
	us, calls, n, err := g.timeWith(p, r, func(copies []*DeviceWeights) ([]float64, int, error) {
		return p.TimeGraph(g.st, copies, samples)
	})
	if err != nil {
		return nil, "", fmt.Errorf("timing: %w", err)
	}
	copies := "weight copies"
	if n == 1 {
		copies = "weight copy"
	}
	return us, fmt.Sprintf("%v, %d calls per graph, %d %s", p.Config, calls, n, copies), nil
}

// Stages times each stage of plan p alone (Plan.TimeStages) over the
// batch's weight rotation; run it after a pass of p.
func (g *Runner) Stages(p *Plan, r routing.Routing, samples int) ([]StageTime, error) {
	var st []StageTime
	_, _, _, err := g.timeWith(p, r, func(copies []*DeviceWeights) ([]float64, int, error) {
		var err error
		st, err = p.TimeStages(g.st, copies, samples)
		return nil, 0, err
	})
	if err != nil {
		return nil, fmt.Errorf("timing stages: %w", err)
	}
	return st, nil
}

// timeWith runs a timing function over as many weight copies as the batch
// needs to keep its experts out of L2.
func (g *Runner) timeWith(p *Plan, r routing.Routing, f func([]*DeviceWeights) ([]float64, int, error)) ([]float64, int, int, error) {
	s := g.layer.Shape
	touched := int64(r.Touched(s.E)) * s.ExpertBytes()
	n := g.ensureCopies(max(RotationCopies(touched, g.l2, 8), g.MinCopies), PlanBytes(s, p.M, p.Config)+256<<20)
	us, calls, err := f(g.copies[:n])
	return us, calls, n, err
}

// ensureCopies grows the rotation to n weight copies, as memory allows.
func (g *Runner) ensureCopies(n int, reserve int64) int {
	s := g.layer.Shape
	for len(g.copies) < n {
		free, _, err := g.ctx.MemInfo()
		if err != nil || free < s.WeightBytes()+reserve {
			break
		}
		c, err := g.copies[0].Clone(s)
		if err != nil {
			break
		}
		g.copies = append(g.copies, c)
	}
	return min(n, len(g.copies))
}

// Forward computes out[M×H] under r and returns the time of one call: the
// wall clock of the pass on the CPU, one timed graph replay (weights
// rotated) on the GPU. Plans are kept per batch shape for the next call.
// A suite that interleaves routings sample by sample uses it; Run times a
// batch at once.
func (g *Runner) Forward(x []float32, r routing.Routing, out []float32) (time.Duration, error) {
	if !g.OnGPU() {
		if err := r.Validate(g.layer.Shape.E); err != nil {
			return 0, err
		}
		t0 := time.Now()
		ForwardCPU(g.layer, x, r, out)
		return time.Since(t0), nil
	}
	key := [2]int{r.M, r.K}
	p, ok := g.plans[key]
	if !ok {
		s := g.layer.Shape
		s.K = r.K
		var err error
		if p, err = g.k.NewPlan(s, r.M, Config{}); err != nil {
			return 0, err
		}
		g.plans[key] = p
	}
	o, err := g.pass(p, x, r, false)
	if err != nil {
		return 0, err
	}
	copy(out, o)
	us, _, err := g.Time(p, r, 1)
	if err != nil {
		return 0, err
	}
	return time.Duration(us[0] * float64(time.Microsecond)), nil
}

// runCPU is Run on ForwardCPU: the checked pass (also the first warm-up
// call; WarmUp, when set, makes more until the time settles), then samples
// timed passes by the wall clock; with stages, as many passes again with
// each stage timed within its pass.
func (g *Runner) runCPU(ctx context.Context, x []float32, r routing.Routing, samples int, stages bool) (Pass, error) {
	l := g.layer
	out := make([]float32, r.M*l.Shape.H)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	ForwardCPU(l, x, r, out)
	scratch := make([]float32, len(out))
	res := Pass{Out: out, Note: CPUKernels(r, l.Shape.E)}
	if g.WarmUp != nil {
		if err := g.WarmUp(func() (float64, error) {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			t0 := time.Now()
			ForwardCPU(l, x, r, scratch)
			return time.Since(t0).Seconds(), nil
		}); err != nil {
			return Pass{}, err
		}
	}
	for range samples {
		if err := ctx.Err(); err != nil {
			return Pass{}, err
		}
		t0 := time.Now()
		ForwardCPU(l, x, r, scratch)
		res.US = append(res.US, time.Since(t0).Seconds()*1e6)
	}
	if stages {
		res.Stages = []StageTime{{Stage: "align", Kernel: "cpu:align"}, {Stage: "gemm1", Kernel: "cpu:gemm1"},
			{Stage: "gemm2", Kernel: "cpu:gemm2"}, {Stage: "combine", Kernel: "cpu:combine"}}
		for range samples {
			if err := ctx.Err(); err != nil {
				return Pass{}, err
			}
			t := ForwardCPUTimed(l, x, r, scratch)
			for i, d := range []time.Duration{t.Align, t.GEMM1, t.GEMM2, t.Combine} {
				res.Stages[i].US = append(res.Stages[i].US, float64(d.Nanoseconds())/1e3)
			}
		}
	}
	return res, nil
}
