package bench

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/reports"
)

// MoE result and metric names. Peers (scripts/peers/moe_peers.py) write the
// same names and parameters with another "impl", so tables put them side by
// side and diffs pair them.
const (
	MoEResult      = "moe"
	MoELatency     = "latency"
	MoEThroughput  = "throughput"
	MoEBandwidth   = "bandwidth"
	MoEPctBW       = "pct_bw_ceiling"
	MoEPctCompute  = "pct_compute_ceiling"
	MoEPctFloor    = "pct_floor"
	MoERelL2       = "rel_l2"
	MoEGate        = "correctness"
	MoEMaxRelL2    = 1e-2
	moeCheckTokens = 64
	// MoETuneResult is the result of one candidate configuration of a
	// --tune sweep (params: the batch's, plus "config").
	MoETuneResult = "moe_tune"
	// MoEConfigParam names the kernel configuration in tuned results.
	MoEConfigParam = "config"
	// MoETuneLatency is a candidate's latency (µs) in its MoETuneResult: a
	// name of its own, so that tables of "latency" show the measured
	// batches and tables of "tune_latency" the candidates.
	MoETuneLatency = "tune_latency"
)

// DefaultGPUBatches and DefaultCPUBatches are the sweeps without --batch.
// The CPU list stops at 64: ForwardCPU at M=4096 would take minutes.
var (
	DefaultGPUBatches = []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}
	DefaultCPUBatches = []int{1, 4, 16, 64}
)

// MoEOptions configure a `bench moe` sweep.
type MoEOptions struct {
	Model   string    // preset name, for the results ("custom" otherwise)
	Shape   moe.Shape // global (unsharded) shape
	TP, EP  int       // sharding: I/TP, E/EP local experts (rank 0)
	Batches []int     // token counts
	// Routing is "uniform" or "zipf:ALPHA"; Trace, when set, replaces it
	// (global expert ids, TraceName its file name for the results).
	Routing   string
	Trace     *moe.Routing
	TraceName string
	Samples   int    // timed samples per batch (0: 20 on CUDA, 6 on the CPU)
	Seed      uint64 // weights, inputs and routing
	Config    moe.Config
	// Tune (CUDA): per batch, try every candidate configuration
	// (moe.Candidates), reject those whose output fails the correctness
	// check, time the others with TuneSamples samples (0: 6), and measure
	// the batch with the fastest. Results then carry the "config" param,
	// and one MoETuneResult per candidate.
	Tune        bool
	TuneSamples int
	// Stages: also time each stage of the pass (align, gemm1, gemm2,
	// combine), as MoEStageResult results: where a pass's time goes. CUDA
	// times each stage's kernels alone; the CPU times each stage within
	// further full passes.
	Stages   bool
	Ceilings *Ceilings // nil: measured quickly first
	// DumpDir, when set, receives out-M<batch>.bf16 (the raw bf16 output of
	// the checked pass) per batch, for the peers' cross-check.
	DumpDir string
	// Progress, when set, hears each step.
	Progress func(step string)
}

// MoEInputError is a problem with the user's input (shape, sharding,
// routing, memory): the CLI exits 2 for it.
type MoEInputError struct{ Err error }

func (e *MoEInputError) Error() string { return e.Err.Error() }
func (e *MoEInputError) Unwrap() error { return e.Err }

func moeInputErr(format string, a ...any) error { return &MoEInputError{fmt.Errorf(format, a...)} }

// MoERow is one batch's outcome, for the command's table.
type MoERow struct {
	M, Slots, Touched int
	Config            string
	Latency           reports.Summary // µs
	TFLOPs, GBps      float64         // at the median latency
	PctBW, PctCompute float64         // NaN when the ceiling is unmeasured
	PctFloor          float64
	RelL2             float64
	Pass              bool
	Tuned             []TuneOutcome // --tune: every candidate, in the order tried
	Stages            []StageRow    // --stages: each kernel timed alone
}

// TuneOutcome is one candidate configuration's run in a --tune sweep.
type TuneOutcome struct {
	Config  moe.Config
	Latency []float64 // µs per call; nil when rejected
	RelL2   float64   // against the float64 reference; NaN when never computed
	Reject  string    // why the candidate may not be picked ("" when it may)
	Compile string    // how its module was made
	Chosen  bool
}

// Median is the candidate's median latency in µs (NaN when rejected).
func (o TuneOutcome) Median() float64 {
	if len(o.Latency) == 0 {
		return math.NaN()
	}
	return reports.Summarize(o.Latency).Median
}

// pickFastest marks and returns the eligible outcome with the lowest median
// latency: -1 when none is eligible. A candidate that was rejected (wrong
// output, failed to compile or launch) is never picked, however fast.
func pickFastest(outs []TuneOutcome) int {
	best := -1
	for i, o := range outs {
		if o.Reject != "" || len(o.Latency) == 0 || !(o.RelL2 <= MoEMaxRelL2) {
			continue
		}
		if best < 0 || o.Median() < outs[best].Median() {
			best = i
		}
	}
	if best >= 0 {
		outs[best].Chosen = true
	}
	return best
}

// MoEReport is what a sweep produced.
type MoEReport struct {
	Local    moe.Shape // the shape one rank computes
	Results  []reports.Result
	Rows     []MoERow
	Ceilings *Ceilings
	Warnings []string
	Routing  moe.Routing // the routing of the largest batch (global ids); smaller batches use its first tokens
	Compile  string      // CUDA: how moe.cu was compiled (cache hit, seconds)
	// KernelsID names the kernels' source and target ("moe.cu 1a2b3c4d5e6f
	// cubin sm_90a"): stable across runs of one build, for the environment.
	KernelsID string
}

// Failed reports whether any batch failed its correctness gate.
func (r *MoEReport) Failed() bool {
	for _, row := range r.Rows {
		if !row.Pass {
			return true
		}
	}
	return false
}

// PrepareMoE checks the options that need no device: shape, sharding,
// batches, routing. It returns the local shape.
func PrepareMoE(opt *MoEOptions) (moe.Shape, error) {
	if opt.TP == 0 {
		opt.TP = 1
	}
	if opt.EP == 0 {
		opt.EP = 1
	}
	local, err := opt.Shape.Shard(opt.TP, opt.EP)
	if err != nil {
		return moe.Shape{}, &MoEInputError{err}
	}
	for _, m := range opt.Batches {
		if m <= 0 {
			return moe.Shape{}, moeInputErr("--batch %d: token counts must be positive", m)
		}
	}
	if opt.Trace != nil {
		if opt.Trace.K != opt.Shape.K {
			return moe.Shape{}, moeInputErr("routing trace %s has topk %d, the shape has %d", opt.TraceName, opt.Trace.K, opt.Shape.K)
		}
		if err := opt.Trace.Validate(opt.Shape.E); err != nil {
			return moe.Shape{}, moeInputErr("routing trace %s: %v", opt.TraceName, err)
		}
	} else if _, err := moe.ParseRoutingSpec(opt.Routing); err != nil {
		return moe.Shape{}, &MoEInputError{err}
	}
	if opt.Samples < 0 {
		return moe.Shape{}, moeInputErr("--samples %d: must be at least 0 (0: 20 on CUDA, 6 on the CPU)", opt.Samples)
	}
	if opt.Config.Kernel != "" {
		if opt.Tune {
			return moe.Shape{}, moeInputErr("--tune tries every candidate configuration: it excludes --config %v", opt.Config)
		}
		if err := opt.Config.Validate(); err != nil {
			return moe.Shape{}, &MoEInputError{err}
		}
	}
	if opt.TuneSamples < 0 {
		return moe.Shape{}, moeInputErr("--tune-samples %d: must be at least 0 (0: 6)", opt.TuneSamples)
	}
	return local, nil
}

func (opt *MoEOptions) routingName() string {
	if opt.Trace != nil {
		return "trace:" + filepath.Base(opt.TraceName)
	}
	if opt.Routing == "" {
		return "uniform"
	}
	return opt.Routing
}

// buildRouting makes the routing of the largest batch (global ids).
func (opt *MoEOptions) buildRouting(maxM int) moe.Routing {
	if opt.Trace != nil {
		return opt.Trace.Repeat(maxM)
	}
	alpha, _ := moe.ParseRoutingSpec(opt.Routing)
	if alpha > 0 {
		return moe.ZipfRouting(maxM, opt.Shape.E, opt.Shape.K, alpha, opt.Seed)
	}
	return moe.UniformRouting(maxM, opt.Shape.E, opt.Shape.K, opt.Seed)
}

// prefix is the first m tokens of r.
func prefix(r moe.Routing, m int) moe.Routing {
	return moe.Routing{IDs: r.IDs[:m*r.K], Weights: r.Weights[:m*r.K], M: m, K: r.K}
}

// checkTokens is every token up to moeCheckTokens, else that many spread
// evenly over the batch, first and last included.
func checkTokens(m int) []int {
	n := min(m, moeCheckTokens)
	out := make([]int, n)
	for i := range out {
		if m <= moeCheckTokens {
			out[i] = i
		} else {
			out[i] = i * (m - 1) / (n - 1)
		}
	}
	return out
}

// RunMoE runs the sweep on dev. Per batch: one pass on poisoned output
// buffers checked against moe.Reference (all tokens up to 64, else 64
// sampled), then the timed samples. Errors of input (shape does not fit in
// memory) are *MoEInputError. A canceled ctx stops it between batches (on
// the CPU also between samples): it returns the report of the batches done
// so far with ctx's error; the batch in flight is left out.
func RunMoE(ctx context.Context, dev gpu.Device, opt MoEOptions) (*MoEReport, error) {
	local, err := PrepareMoE(&opt)
	if err != nil {
		return nil, err
	}
	info := dev.Info()
	onGPU := info.Backend == gpu.CUDA
	if len(opt.Batches) == 0 {
		opt.Batches = DefaultGPUBatches
		if !onGPU {
			opt.Batches = DefaultCPUBatches
		}
	}
	if opt.Samples == 0 {
		opt.Samples = 20
		if !onGPU {
			opt.Samples = 6
		}
	}
	progress := func(s string) {
		if opt.Progress != nil {
			opt.Progress(s)
		}
	}
	rep := &MoEReport{Local: local}
	maxM := slices.Max(opt.Batches)

	var cctx *cuda.Context
	if onGPU {
		var ok bool
		if cctx, ok = gpu.CUDAOf(dev); !ok {
			return nil, fmt.Errorf("device %s says CUDA but has no CUDA context", info.ID)
		}
		if err := moe.CheckCUDAShape(local); err != nil {
			return nil, &MoEInputError{err}
		}
	}
	if err := checkFits(dev, local, opt, maxM); err != nil {
		return nil, err
	}

	if opt.Ceilings == nil {
		progress("ceilings")
		c, err := MeasureCeilings(ctx, dev, CeilingOptions{Quick: true})
		if err != nil && c != nil && errors.Is(err, ctx.Err()) {
			rep.Ceilings = c
			return rep, err
		}
		if err != nil {
			return nil, fmt.Errorf("measuring ceilings: %w", err)
		}
		opt.Ceilings = c
	}
	if opt.Tune && !onGPU {
		rep.Warnings = append(rep.Warnings, "--tune: the CPU has one implementation; nothing to tune")
		opt.Tune = false
	}
	if opt.Config.Kernel != "" && !onGPU {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("--config %v: the CPU has one implementation; the configuration applies to CUDA kernels only", opt.Config))
		opt.Config = moe.Config{}
	}
	if opt.TuneSamples == 0 {
		opt.TuneSamples = 6
	}

	rep.Ceilings = opt.Ceilings
	if _, _, note := opt.Ceilings.Stream(); note != "" {
		rep.Warnings = append(rep.Warnings, note)
	}
	for _, c := range []*Ceiling{&opt.Ceilings.D2D, &opt.Ceilings.GEMM} {
		if !c.Measured() {
			rep.Warnings = append(rep.Warnings, "ceiling unmeasured: "+c.Unmeasured+": percentages of it are unmeasured")
		}
	}

	progress("weights")
	layer := moe.NewLayer(local, opt.Seed)
	rep.Routing = opt.buildRouting(maxM)
	xAll := moe.RandomInput(maxM, local.H, opt.Seed+1)

	var gk *gpuMoE
	if onGPU {
		gk, err = newGPUMoE(cctx, layer, opt, maxM)
		if err != nil {
			return nil, err
		}
		defer gk.close()
		rep.Compile = gk.compileNote
		rep.KernelsID = gk.kernelsID
	}

	sampler, stateNote := newStateSampler(dev)
	defer sampler.shutdown()
	if stateNote != "" {
		rep.Warnings = append(rep.Warnings, stateNote)
	}
	for _, m := range opt.Batches {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		progress(fmt.Sprintf("M=%d", m))
		r := prefix(rep.Routing, m).Localize(opt.Shape.E, opt.EP, 0)
		x := xAll[:m*local.H]
		tokens := checkTokens(m)
		var want []float64
		var out []float32
		var us []float64
		var cfg string
		var tuned []TuneOutcome
		var stages []moe.StageTime
		sampler.start()
		switch {
		case onGPU && opt.Tune:
			want = moe.ReferenceTokens(layer, x, r, tokens)
			tuned = gk.tune(ctx, m, x, r, tokens, want, opt.TuneSamples, func(s string) { progress(fmt.Sprintf("M=%d %s", m, s)) })
			if err := ctx.Err(); err != nil {
				return rep, err // the batch in flight is left out
			}
			best := pickFastest(tuned)
			if best < 0 {
				return nil, fmt.Errorf("M=%d: --tune: no candidate configuration passed:\n  %s", m, strings.Join(rejections(tuned), "\n  "))
			}
			out, us, stages, cfg, err = gk.run(ctx, m, x, r, opt.Samples, tuned[best].Config, opt.Stages)
		case onGPU:
			out, us, stages, cfg, err = gk.run(ctx, m, x, r, opt.Samples, opt.Config, opt.Stages)
		default:
			out, us, stages, cfg, err = runCPU(ctx, layer, x, r, opt.Samples, opt.Stages)
		}
		state := sampler.stop()
		if err != nil && errors.Is(err, ctx.Err()) {
			return rep, err // interrupted: the batch in flight is left out
		}
		if err != nil {
			return nil, fmt.Errorf("M=%d: %w", m, err)
		}
		if testCorruptOutput != nil {
			testCorruptOutput(out)
		}
		if opt.DumpDir != "" {
			if err := dumpBF16(filepath.Join(opt.DumpDir, fmt.Sprintf("out-M%d.bf16", m)), out); err != nil {
				return nil, err
			}
		}
		if want == nil {
			want = moe.ReferenceTokens(layer, x, r, tokens)
		}
		rel := moe.RelL2(checkedRows(out, tokens, local.H), want)
		if i := firstNonFinite(out); i >= 0 {
			// The pass ran on NaN-poisoned buffers: an element no kernel
			// wrote fails the gate even outside the checked tokens.
			rel = math.NaN()
			cfg += fmt.Sprintf("; out[%d] (token %d) is %v", i, i/local.H, out[i])
		}
		res, row := moeResult(opt, local, m, r, us, rel, cfg, len(tokens))
		res.GPUState = state
		if note := res.ThrottleNote(); note != "" {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("M=%d: %s", m, note))
		}
		if tuned != nil {
			res, row = withTuning(opt, local, m, res, row, tuned)
			for _, o := range tuned {
				rep.Results = append(rep.Results, tuneResult(opt, local, m, o))
			}
		}
		if stages != nil {
			sres, srows := stageResults(opt, local, m, r, stages)
			if cfg, ok := res.Params[MoEConfigParam]; ok {
				for i := range sres {
					sres[i].Params[MoEConfigParam] = cfg // tuned: the configuration that ran
				}
			}
			rep.Results = append(rep.Results, sres...)
			row.Stages = srows
		}
		rep.Results = append(rep.Results, res)
		rep.Rows = append(rep.Rows, row)
		for _, w := range res.Warnings {
			if strings.Contains(w, overCeilingMark) {
				rep.Warnings = append(rep.Warnings, w)
			}
		}
	}
	return rep, nil
}

// firstNonFinite is the index of the first NaN or infinite element, or -1.
func firstNonFinite(v []float32) int {
	for i, x := range v {
		if x != x || x > math.MaxFloat32 || x < -math.MaxFloat32 {
			return i
		}
	}
	return -1
}

// checkedRows gathers the checked tokens' output rows.
func checkedRows(out []float32, tokens []int, h int) []float32 {
	got := make([]float32, 0, len(tokens)*h)
	for _, t := range tokens {
		got = append(got, out[t*h:(t+1)*h]...)
	}
	return got
}

func rejections(outs []TuneOutcome) []string {
	var lines []string
	for _, o := range outs {
		if o.Reject != "" {
			lines = append(lines, fmt.Sprintf("%v: %s", o.Config, o.Reject))
		}
	}
	return lines
}

// withTuning names the chosen configuration in the batch's result (param
// "config") and says what it was chosen over.
func withTuning(opt MoEOptions, local moe.Shape, m int, res reports.Result, row MoERow, outs []TuneOutcome) (reports.Result, MoERow) {
	var chosen moe.Config
	var others []string
	for _, o := range outs {
		switch {
		case o.Chosen:
			chosen = o.Config
		case o.Reject != "":
			others = append(others, fmt.Sprintf("%v rejected (%s)", o.Config, o.Reject))
		default:
			others = append(others, fmt.Sprintf("%v %.1f µs", o.Config, o.Median()))
		}
	}
	res.Params[MoEConfigParam] = chosen.String()
	static := moe.ChooseConfig(local, m)
	res.Warnings = append(res.Warnings, fmt.Sprintf("tuned over %d candidates (static table: %v): chose %v; others: %s",
		len(outs), static, chosen, strings.Join(others, "; ")))
	row.Tuned = outs
	return res, row
}

// tuneResult is one candidate's record: its latency samples (or why it was
// rejected) and its error against the reference.
func tuneResult(opt MoEOptions, local moe.Shape, m int, o TuneOutcome) reports.Result {
	p := MoEParams(opt, local, m, "mstar")
	p[MoEConfigParam] = o.Config.String()
	lat := reports.Metric{Name: MoETuneLatency, Unit: "µs", Better: reports.LowerIsBetter, Samples: o.Latency}
	if len(o.Latency) == 0 {
		lat.Samples = nil
		lat.Unmeasured = "rejected: " + o.Reject
	}
	rel := reports.Metric{Name: MoERelL2, Better: reports.LowerIsBetter, Samples: []float64{o.RelL2}}
	if math.IsNaN(o.RelL2) || math.IsInf(o.RelL2, 0) {
		rel.Samples = nil
		rel.Unmeasured = "no finite output"
		if o.Reject != "" {
			rel.Unmeasured = o.Reject
		}
	}
	r := reports.Result{Name: MoETuneResult, Params: p, Metrics: []reports.Metric{lat, rel}}
	if o.Reject != "" {
		r.Warnings = append(r.Warnings, "rejected: "+o.Reject)
	}
	if o.Chosen {
		r.Warnings = append(r.Warnings, "chosen: the fastest candidate that passed")
	}
	if o.Compile != "" {
		r.Warnings = append(r.Warnings, "module: "+o.Compile)
	}
	return r
}

// testCorruptOutput, set by tests, alters the checked pass's output so the
// gate's failure path runs.
var testCorruptOutput func(out []float32)

// checkFits refuses, as bad input, a shape whose weights and buffers do not
// fit in the device's free memory, saying how much it needs.
func checkFits(dev gpu.Device, local moe.Shape, opt MoEOptions, maxM int) error {
	need := local.WeightBytes()
	slots := int64(maxM) * int64(local.K)
	if dev.Info().Backend == gpu.CUDA {
		cfgs := []moe.Config{opt.Config}
		if opt.Config.Kernel == "" {
			cfgs = []moe.Config{moe.ChooseConfig(local, maxM)}
		}
		if opt.Tune {
			cfgs = moe.Candidates(local, maxM)
		}
		var plan int64
		for _, c := range cfgs {
			plan = max(plan, moe.PlanBytes(local, maxM, c))
		}
		need += plan
	} else {
		// ForwardCPU: float32 x, act, y and out, plus the host-side inputs.
		need += 4 * (2*int64(maxM)*int64(local.H) + slots*int64(local.I) + slots*int64(local.H))
	}
	if err := gpu.CheckFits(dev, fmt.Sprintf("shape %v at M=%d", local, maxM), need, "try --tp/--ep or smaller --batch"); err != nil {
		return &MoEInputError{err}
	}
	return nil
}

func runCPU(ctx context.Context, l *moe.Layer, x []float32, r moe.Routing, samples int, stages bool) (out []float32, us []float64, st []moe.StageTime, cfg string, err error) {
	out = make([]float32, r.M*l.Shape.H)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	moe.ForwardCPU(l, x, r, out) // the checked pass, also the warm-up
	scratch := make([]float32, len(out))
	// The checked pass was the first warm-up call; the rest settle.
	sec, err := TimeWall(Timing{Samples: samples, Settle: &DefaultSettle}, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		moe.ForwardCPU(l, x, r, scratch)
		return nil
	})
	if err != nil {
		return nil, nil, nil, "", err
	}
	for _, s := range sec {
		us = append(us, s*1e6)
	}
	if stages {
		// Stages of further passes, each timed within its pass.
		st = []moe.StageTime{{Stage: "align", Kernel: "cpu:align"}, {Stage: "gemm1", Kernel: "cpu:gemm1"},
			{Stage: "gemm2", Kernel: "cpu:gemm2"}, {Stage: "combine", Kernel: "cpu:combine"}}
		for range samples {
			if err := ctx.Err(); err != nil {
				return nil, nil, nil, "", err
			}
			t := moe.ForwardCPUTimed(l, x, r, scratch)
			for i, d := range []time.Duration{t.Align, t.GEMM1, t.GEMM2, t.Combine} {
				st[i].US = append(st[i].US, float64(d.Nanoseconds())/1e3)
			}
		}
	}
	return out, us, st, moe.CPUKernels(r, l.Shape.E), nil
}

// gpuWarmUp settles a CUDA timing loop: graph replays (each a few ms of
// back-to-back calls) until their device time stops improving, for at least
// 100 ms, so that clocks and power state are those of a sustained run.
func gpuWarmUp(replay func() (float64, error)) error {
	_, err := SettleCalls(Settle{MinTime: 100 * time.Millisecond, MaxTime: 3 * time.Second}, replay)
	return err
}

// gpuMoE holds the CUDA side of a sweep: kernels, weight copies, a stream.
type gpuMoE struct {
	ctx         *cuda.Context
	k           *moe.Kernels
	layer       *moe.Layer
	copies      []*moe.DeviceWeights
	st          *cuda.Stream
	opt         MoEOptions
	l2          int64
	compileNote string
	kernelsID   string
}

func newGPUMoE(ctx *cuda.Context, l *moe.Layer, opt MoEOptions, maxM int) (*gpuMoE, error) {
	var opts []string
	if opt.Config.Kernel == "tiled" {
		opts = opt.Config.Defines() // a custom tile is part of the base module
	}
	k, err := moe.CompileKernels(ctx, opts)
	if err != nil {
		return nil, err
	}
	g := &gpuMoE{ctx: ctx, k: k, layer: l, opt: opt, l2: ctx.Props().L2Bytes}
	sum := sha256.Sum256([]byte(moe.Source))
	g.kernelsID = fmt.Sprintf("moe.cu %x %s %s", sum[:6], k.Compile.Kind, ctx.Props().Arch())
	g.compileNote = fmt.Sprintf("moe.cu: %s for %s, cache hit %v, %.2f s", k.Compile.Kind, ctx.Props().Arch(), k.Compile.CacheHit, k.Compile.Seconds)
	w, err := moe.UploadWeights(ctx, l)
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("uploading weights: %w", err)
	}
	g.copies = []*moe.DeviceWeights{w}
	if g.st, err = ctx.NewStream(); err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

func (g *gpuMoE) close() {
	for _, c := range g.copies {
		c.Free()
	}
	if g.st != nil {
		g.st.Destroy()
	}
	g.k.Close()
}

// ensureCopies grows the rotation to n weight copies, as memory allows.
func (g *gpuMoE) ensureCopies(n int, reserve int64) int {
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

// checkedPass makes a plan for configuration c (the empty Config: the
// static table's pick) and runs one pass on poisoned buffers; the caller
// frees the plan.
func (g *gpuMoE) checkedPass(m int, x []float32, r moe.Routing, c moe.Config) (*moe.Plan, []float32, error) {
	p, err := g.k.NewPlan(g.layer.Shape, m, c)
	if err != nil {
		return nil, nil, err
	}
	p.WarmUp = gpuWarmUp
	if err := p.SetInputs(x, r); err != nil {
		p.Free()
		return nil, nil, err
	}
	if err := p.Poison(g.st); err != nil {
		p.Free()
		return nil, nil, err
	}
	if err := p.Enqueue(g.st, g.copies[0]); err != nil {
		p.Free()
		return nil, nil, err
	}
	if err := g.st.Synchronize(); err != nil {
		p.Free()
		return nil, nil, fmt.Errorf("checked pass: %w", err)
	}
	out, err := p.Output()
	if err != nil {
		p.Free()
		return nil, nil, err
	}
	return p, out, nil
}

// timePlan times a plan, rotating weight copies as the batch needs.
func (g *gpuMoE) timePlan(p *moe.Plan, r moe.Routing, samples int) ([]float64, string, error) {
	us, calls, n, err := g.timeWith(p, r, func(copies []*moe.DeviceWeights) ([]float64, int, error) {
		return p.TimeGraph(g.st, copies, samples)
	})
	if err != nil {
		return nil, "", fmt.Errorf("timing: %w", err)
	}
	return us, fmt.Sprintf("%v, %d calls per graph, %d weight copies", p.Config, calls, n), nil
}

// timeWith runs a timing function over as many weight copies as the batch
// needs to keep its experts out of L2.
func (g *gpuMoE) timeWith(p *moe.Plan, r moe.Routing, f func([]*moe.DeviceWeights) ([]float64, int, error)) ([]float64, int, int, error) {
	s := g.layer.Shape
	touched := int64(r.Touched(s.E)) * s.ExpertBytes()
	n := g.ensureCopies(moe.RotationCopies(touched, g.l2, 8), moe.PlanBytes(s, p.M, p.Config)+256<<20)
	us, calls, err := f(g.copies[:n])
	return us, calls, n, err
}

// run makes a checked pass with configuration c and times it; with stages,
// each of its kernels is then timed alone as well.
// A canceled ctx stops it between those steps with ctx's error.
func (g *gpuMoE) run(ctx context.Context, m int, x []float32, r moe.Routing, samples int, c moe.Config, stages bool) ([]float32, []float64, []moe.StageTime, string, error) {
	p, out, err := g.checkedPass(m, x, r, c)
	if err != nil {
		return nil, nil, nil, "", err
	}
	defer p.Free()
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, "", err
	}
	us, note, err := g.timePlan(p, r, samples)
	if err != nil {
		return nil, nil, nil, "", err
	}
	var st []moe.StageTime
	if stages {
		if err := ctx.Err(); err != nil {
			return nil, nil, nil, "", err
		}
		_, _, _, err = g.timeWith(p, r, func(copies []*moe.DeviceWeights) ([]float64, int, error) {
			st, err = p.TimeStages(g.st, copies, samples)
			return nil, 0, err
		})
		if err != nil {
			return nil, nil, nil, "", fmt.Errorf("timing stages: %w", err)
		}
	}
	return out, us, st, note, nil
}

// tune runs every candidate configuration for one batch: a checked pass
// (compared with want on the checked tokens) and, for those that pass,
// `samples` timed samples. A canceled ctx stops it before the next
// candidate (the caller then drops the batch).
func (g *gpuMoE) tune(ctx context.Context, m int, x []float32, r moe.Routing, tokens []int, want []float64, samples int, progress func(string)) []TuneOutcome {
	cands := moe.Candidates(g.layer.Shape, m)
	outs := make([]TuneOutcome, 0, len(cands))
	for i, c := range cands {
		if ctx.Err() != nil {
			break
		}
		progress(fmt.Sprintf("tune %d/%d %v", i+1, len(cands), c))
		o := TuneOutcome{Config: c, RelL2: math.NaN()}
		if res, err := g.k.Module(c); err != nil {
			o.Reject = "compile: " + firstLine(err.Error())
			outs = append(outs, o)
			continue
		} else {
			o.Compile = fmt.Sprintf("%s, cache hit %v, %.2f s", res.Kind, res.CacheHit, res.Seconds)
		}
		p, out, err := g.checkedPass(m, x, r, c)
		if err != nil {
			o.Reject = firstLine(err.Error())
			outs = append(outs, o)
			continue
		}
		o.RelL2 = moe.RelL2(checkedRows(out, tokens, g.layer.Shape.H), want)
		if i := firstNonFinite(out); i >= 0 {
			o.Reject = fmt.Sprintf("out[%d] (token %d, column %d) is %v: never written or not finite", i, i/g.layer.Shape.H, i%g.layer.Shape.H, out[i])
			p.Free()
			outs = append(outs, o)
			continue
		}
		if !(o.RelL2 <= MoEMaxRelL2) {
			o.Reject = fmt.Sprintf("rel L2 %.3g > %g against the float64 reference", o.RelL2, MoEMaxRelL2)
			p.Free()
			outs = append(outs, o)
			continue
		}
		us, _, err := g.timePlan(p, r, samples)
		p.Free()
		if err != nil {
			o.Reject = firstLine(err.Error())
		} else {
			o.Latency = us
		}
		outs = append(outs, o)
	}
	return outs
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func dumpBF16(path string, v []float32) error {
	b := make([]uint16, len(v))
	moe.ToBF16(b, v)
	var raw []byte
	if len(b) > 0 {
		raw = unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 2*len(b))
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return fmt.Errorf("dumping output: %w", err)
	}
	return nil
}

// MoEParams are a result's parameters; the peers write the same ones.
func MoEParams(opt MoEOptions, local moe.Shape, m int, impl string) reports.Params {
	model := opt.Model
	if model == "" {
		model = "custom"
	}
	return reports.Params{
		"model":   model,
		"experts": strconv.Itoa(local.E),
		"topk":    strconv.Itoa(local.K),
		"hidden":  strconv.Itoa(local.H),
		"inter":   strconv.Itoa(local.I),
		"tp":      strconv.Itoa(opt.TP),
		"ep":      strconv.Itoa(opt.EP),
		"batch":   strconv.Itoa(m),
		"routing": opt.routingName(),
		"seed":    strconv.FormatUint(opt.Seed, 10),
		"impl":    impl,
	}
}

// moeResult turns one batch's samples into a result. Throughput counts
// Shape.Flops of the computed slots; bandwidth counts Shape.Bytes (touched
// experts' weights once, x and out once, the routing once); the floor is
// max(bytes / read ceiling, flops / GEMM ceiling) (the d2d copy ceiling
// when the read ceiling is unmeasured, with a warning). A percentage above
// OverCeilingPct warns, naming the ceiling.
func moeResult(opt MoEOptions, local moe.Shape, m int, r moe.Routing, us []float64, rel float64, cfg string, checked int) (reports.Result, MoERow) {
	slots, touched := r.Slots(), r.Touched(local.E)
	flops, bytes := local.Flops(slots), local.Bytes(m, touched, slots)
	c := opt.Ceilings
	per := func(f func(sec float64) float64) []float64 {
		out := make([]float64, len(us))
		for i, u := range us {
			out[i] = f(u * 1e-6)
		}
		return out
	}
	tflops := per(func(s float64) float64 { return flops / s / 1e12 })
	gbps := per(func(s float64) float64 { return bytes / s / 1e9 })
	metric := func(name, unit string, better reports.Direction, samples []float64) reports.Metric {
		return reports.Metric{Name: name, Unit: unit, Better: better, Samples: samples}
	}
	pct := func(name string, ce Ceiling, vals []float64) reports.Metric {
		if !ce.Measured() {
			return reports.Metric{Name: name, Unit: "%", Better: reports.HigherIsBetter, Unmeasured: "ceiling unmeasured: " + ce.Unmeasured}
		}
		out := make([]float64, len(vals))
		for i, v := range vals {
			out[i] = 100 * v / ce.Value
		}
		return metric(name, "%", reports.HigherIsBetter, out)
	}
	bw, bwName, _ := c.Stream()
	floor := reports.Metric{Name: MoEPctFloor, Unit: "%", Better: reports.HigherIsBetter}
	if bw.Measured() && c.GEMM.Measured() {
		floorSec := math.Max(bytes/(bw.Value*1e9), flops/(c.GEMM.Value*1e12))
		floor.Samples = per(func(s float64) float64 { return 100 * floorSec / s })
	} else {
		floor.Unmeasured = "needs a bandwidth (read or d2d) and the gemm ceiling"
	}
	pass := rel <= MoEMaxRelL2
	gate := reports.Gate{Name: MoEGate, Pass: pass,
		Reason: fmt.Sprintf("rel L2 %.3g against the float64 reference on %d of %d tokens (limit %g); %s", rel, checked, m, MoEMaxRelL2, cfg)}
	relMetric := metric(MoERelL2, "", reports.LowerIsBetter, []float64{rel})
	if math.IsNaN(rel) || math.IsInf(rel, 0) {
		relMetric = reports.Metric{Name: MoERelL2, Better: reports.LowerIsBetter, Unmeasured: fmt.Sprintf("output not finite (%v)", rel)}
	}
	res := reports.Result{
		Name:   MoEResult,
		Params: MoEParams(opt, local, m, "mstar"),
		Metrics: []reports.Metric{
			metric(MoELatency, "µs", reports.LowerIsBetter, us),
			metric(MoEThroughput, "TFLOP/s", reports.HigherIsBetter, tflops),
			metric(MoEBandwidth, "GB/s", reports.HigherIsBetter, gbps),
			pct(MoEPctBW, bw, gbps),
			pct(MoEPctCompute, c.GEMM, tflops),
			floor,
			relMetric,
		},
		Gates: []reports.Gate{gate},
	}
	sum := reports.Summarize(us)
	med := sum.Median * 1e-6
	row := MoERow{M: m, Slots: slots, Touched: touched, Config: cfg, Latency: sum,
		TFLOPs: flops / med / 1e12, GBps: bytes / med / 1e9, RelL2: rel, Pass: pass,
		PctBW: math.NaN(), PctCompute: math.NaN(), PctFloor: math.NaN()}
	if bw.Measured() {
		row.PctBW = 100 * row.GBps / bw.Value
	}
	if c.GEMM.Measured() {
		row.PctCompute = 100 * row.TFLOPs / c.GEMM.Value
	}
	if floor.Measured() {
		row.PctFloor = 100 * math.Max(bytes/(bw.Value*1e9), flops/(c.GEMM.Value*1e12)) / med
	}
	// The table shows the rate at the median latency, report show the
	// median of the per-sample percentages: warn when either is over.
	over := func(v float64, name string) float64 {
		if m := res.Metric(name); m != nil && m.Measured() {
			return math.Max(v, reports.Summarize(m.Samples).Median)
		}
		return v
	}
	for _, p := range []struct {
		name string
		v    float64
		ce   Ceiling
		what string
	}{
		{"%bw", over(row.PctBW, MoEPctBW), bw, bwName},
		{"%compute", over(row.PctCompute, MoEPctCompute), c.GEMM, "gemm"},
		{"%floor", over(row.PctFloor, MoEPctFloor), floorBound(bytes, flops, bw, c.GEMM), floorBoundName(bytes, flops, bw, c.GEMM, bwName)},
	} {
		if w := OverCeiling(p.name, p.v, p.what, p.ce); w != "" {
			res.Warnings = append(res.Warnings, fmt.Sprintf("M=%d: %s", m, w))
		}
	}
	return res, row
}

// floorBound is the ceiling that sets the floor: the bandwidth one when the
// bytes take longer at it than the flops at the GEMM ceiling, else GEMM.
func floorBound(bytes, flops float64, bw, gemm Ceiling) Ceiling {
	if !bw.Measured() || !gemm.Measured() || bytes/(bw.Value*1e9) >= flops/(gemm.Value*1e12) {
		return bw
	}
	return gemm
}

func floorBoundName(bytes, flops float64, bw, gemm Ceiling, bwName string) string {
	if floorBound(bytes, flops, bw, gemm).Unit == UnitTFLOPs {
		return "gemm"
	}
	return bwName
}

// IsMoEInputError reports whether err is bad input (exit 2).
func IsMoEInputError(err error) bool {
	var ie *MoEInputError
	return errors.As(err, &ie)
}
