// Package moe is the bench moe suite: the fused-MoE layer (kernels/moe,
// through moe.Runner) over batch sizes, checked against a float64
// reference, timed, and reported against the ceilings; optionally tuned
// per batch (--tune) and timed stage by stage (--stages).
package moe

import (
	"context"
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

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/bench/ceilings"

	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/routing"
	"github.com/mstar-dev/mstar/reports/results"
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
	// EnvKernelsVersion: the env key naming moe.KernelVersion in tune
	// and bench documents.
	EnvKernelsVersion = "moe_kernels_version"
	// MoEConfigParam names the kernel configuration in tuned results.
	MoEConfigParam = "config"
	// MoETuneLatency is a candidate's latency (µs) in its MoETuneResult: a
	// name of its own, so that tables of "latency" show the measured
	// batches and tables of "tune_latency" the candidates.
	MoETuneLatency = "tune_latency"
	// MoETuneFresh: a finalist's median latency in each fresh process
	// (tune moe --finalists).
	MoETuneFresh = "tune_fresh_latency"
	// MoETuneGemm1 and MoETuneGemm2 are a candidate's GEMMs timed alone
	// (CUDA), from which the tuner's split candidate is built.
	MoETuneGemm1 = "tune_gemm1"
	MoETuneGemm2 = "tune_gemm2"
	// TuneStaticNote starts the warning of tune moe's chosen candidate
	// that names the static table's pick for its batch.
	TuneStaticNote = "static table: "
)

// DefaultGPUBatches and DefaultCPUBatches are the sweeps without --batch.
// The CPU list stops at 64: ForwardCPU at M=4096 would take minutes.
var (
	DefaultGPUBatches = []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}
	DefaultCPUBatches = []int{1, 4, 16, 64}
)

// MaxWeightCopies bounds --weight-copies: each copy is the layer's whole
// weights (4.8 GB for qwen3-235b-a22b).
const MaxWeightCopies = 8

// MoEOptions configure a `bench moe` sweep.
type MoEOptions struct {
	Model   string    // preset name, for the results ("custom" otherwise)
	Shape   moe.Shape // global (unsharded) shape
	TP, EP  int       // sharding: I/TP, E/EP local experts (rank 0)
	Batches []int     // token counts
	// Routing is "uniform" or "zipf:ALPHA"; Trace, when set, replaces it
	// (global expert ids, TraceName its file name for the results).
	Routing   string
	Trace     *routing.Routing
	TraceName string
	Samples   int // timed samples per batch (0: 20 on CUDA, 6 on the CPU)
	// WeightCopies (CUDA): time every batch over at least this many copies
	// of the weights, a sample rotating through them, so that it averages
	// that many placements (moe.Runner.MinCopies; 0: the L2 rule alone).
	WeightCopies int
	// Rounds repeats the whole sweep (see Rounds; 0 or 1: once); the
	// ceilings are measured once, in the first.
	Rounds int
	// tunedInRound are the configurations --tune chose in the first round;
	// later rounds run them without tuning again.
	tunedInRound map[int]BatchConfig
	Seed         uint64 // weights, inputs and routing
	Config       moe.Config
	// Without Config (CUDA): each batch's configuration comes from the
	// tuned file for the local shape and device, found by ConfigLookup (nil:
	// moe.DefaultTunedLookup, the user's folder then the shipped files),
	// else the static table; StaticConfigs skips the files. Results name
	// the configuration and its source (params config, config_source).
	ConfigLookup  *moe.TunedLookup
	StaticConfigs bool
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
	Ceilings *ceilings.Ceilings // nil: measured quickly first
	// DumpDir, when set, receives out-M<batch>.bf16 (the raw bf16 output of
	// the checked pass) per batch, for the peers' cross-check.
	DumpDir string
	// Progress, when set, hears each step.
	Progress func(step string)
	// Sink gets each batch's results as soon as the batch is finished, and
	// the ceilings' once they are known.
	Sink results.Sink
}

// TuneOutcome is one candidate configuration's run in a --tune sweep.
type TuneOutcome struct {
	Config  moe.Config
	Latency []float64 // µs per call; nil when rejected
	RelL2   float64   // against the float64 reference; NaN when never computed
	Reject  string    // why the candidate may not be picked ("" when it may)
	Compile string    // how its module was made
	// Fresh: a finalist's median latency in each fresh process (µs);
	// FreshErr why it was not timed there.
	Fresh    []float64
	FreshErr string
	Chosen   bool
	// Gemm1, Gemm2: each GEMM timed alone (µs per call), where the runner
	// can; the split candidate is built from them.
	Gemm1, Gemm2 []float64
}

// Median is the candidate's median latency in µs (NaN when rejected).
func (o TuneOutcome) Median() float64 {
	if len(o.Latency) == 0 {
		return math.NaN()
	}
	return results.Summarize(o.Latency).Median
}

// pickFastest marks and returns the eligible outcome with the lowest median
// latency: -1 when none is eligible. A candidate that was rejected (wrong
// output, failed to compile or launch) is never picked, however fast.
func pickFastest(outs []TuneOutcome) int {
	best := fastestOutcome(outs)
	if best >= 0 {
		outs[best].Chosen = true
	}
	return best
}

// MoEReport is what a sweep produced.
type MoEReport struct {
	Local    moe.Shape // the shape one rank computes
	Results  []results.Result
	Ceilings *ceilings.Ceilings
	Warnings []string
	Routing  routing.Routing // the routing of the largest batch (global ids); smaller batches use its first tokens
	Compile  string          // CUDA: how moe.cu was compiled (cache hit, seconds)
	Batches  int             // batches finished
	// KernelsID names the kernels' source and target ("moe.cu 1a2b3c4d5e6f
	// cubin sm_90a"): stable across runs of one build, for the environment.
	KernelsID string
	Rounds    int // rounds of the sweep that completed
}

// Failed reports whether any batch failed its correctness gate.
func (r *MoEReport) Failed() bool {
	for _, res := range r.Results {
		if !res.Passed() {
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
		return moe.Shape{}, badinput.Wrap(err)
	}
	for _, m := range opt.Batches {
		if m <= 0 {
			return moe.Shape{}, badinput.Errorf("--batch %d: token counts must be positive", m)
		}
	}
	if opt.Trace != nil {
		if opt.Trace.K != opt.Shape.K {
			return moe.Shape{}, badinput.Errorf("routing trace %s has topk %d, the shape has %d", opt.TraceName, opt.Trace.K, opt.Shape.K)
		}
		if err := opt.Trace.Validate(opt.Shape.E); err != nil {
			return moe.Shape{}, badinput.Errorf("routing trace %s: %v", opt.TraceName, err)
		}
	} else if _, err := moe.ParseRoutingSpec(opt.Routing); err != nil {
		return moe.Shape{}, badinput.Wrap(err)
	} else {
		// As parsed: "Uniform" is recorded as uniform and "zipf:1.20" as
		// zipf:1.2, so their results pair in report diff and their tuned
		// picks are found.
		if opt.Routing != "" {
			opt.Routing = moe.CanonicalRouting(opt.Routing)
		}
	}
	if opt.Samples < 0 {
		return moe.Shape{}, badinput.Errorf("--samples %d: must be at least 0 (0: 20 on CUDA, 6 on the CPU)", opt.Samples)
	}
	if opt.Config.Kernel != "" {
		if opt.Tune {
			return moe.Shape{}, badinput.Errorf("--tune tries every candidate configuration: it excludes --config %v", opt.Config)
		}
		if err := opt.Config.Validate(); err != nil {
			return moe.Shape{}, badinput.Wrap(err)
		}
	}
	if opt.TuneSamples < 0 {
		return moe.Shape{}, badinput.Errorf("--tune-samples %d: must be at least 0 (0: 6)", opt.TuneSamples)
	}
	if opt.WeightCopies < 0 || opt.WeightCopies > MaxWeightCopies {
		return moe.Shape{}, badinput.Errorf("--weight-copies %d: must be 0 (as many as keep the touched experts out of L2) to %d", opt.WeightCopies, MaxWeightCopies)
	}
	if opt.Tune {
		if err := moe.ValidateTuneFilter(); err != nil {
			return moe.Shape{}, badinput.Wrap(err)
		}
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

// tunedRouting is the key this run's batches have in a tuned file: the
// routing, with the EP rank count (moe.TunedRouting).
func (opt *MoEOptions) tunedRouting() string { return moe.TunedRouting(opt.routingName(), opt.EP) }

// candidates are batch m's tuning candidates on g under this run's routing
// (its first m tokens, local ids): CandidatesFor's under uniform routing,
// more families under a skewed one (moe.CandidatesUnder); under EP also
// those of the rank's load (moe.RankTokens).
func (opt *MoEOptions) candidates(g moe.GPU, local moe.Shape, m int) []moe.Config {
	if opt.routingName() == moe.Uniform {
		return opt.withRankLoad(g, local, m, func(n int) []moe.Config { return moe.CandidatesFor(g, local, n) })
	}
	return opt.candidatesOf(g, local, opt.buildRouting(m).Localize(opt.Shape.E, opt.EP, 0))
}

// candidatesOf is candidates for the batch of local routing r.
func (opt *MoEOptions) candidatesOf(g moe.GPU, local moe.Shape, r routing.Routing) []moe.Config {
	if opt.routingName() == moe.Uniform {
		// A uniform draw that happens to read skewed changes nothing.
		return opt.withRankLoad(g, local, r.M, func(n int) []moe.Config { return moe.CandidatesFor(g, local, n) })
	}
	return opt.withRankLoad(g, local, r.M, func(n int) []moe.Config { return moe.CandidatesUnder(g, local, n, r) })
}

// staticConfig is the static table's pick for batch m on rank 0.
func (opt *MoEOptions) staticConfig(g moe.GPU, local moe.Shape, m int) moe.Config {
	return moe.ChooseConfigOnRank(g, local, m, opt.EP)
}

// withRankLoad is the candidates list(m), and under EP also list at the
// rank's load (moe.RankTokens), each once and where it runs at m, with
// staticConfig's pick first: the tuner times both families, since the
// table's pick follows the rank's load only below its wg range.
func (opt *MoEOptions) withRankLoad(g moe.GPU, local moe.Shape, m int, list func(n int) []moe.Config) []moe.Config {
	mr := moe.RankTokens(m, opt.EP)
	if mr == m {
		return list(m)
	}
	first := opt.staticConfig(g, local, m)
	out, seen := []moe.Config{first}, map[string]bool{first.String(): true}
	for _, c := range append(list(m), list(mr)...) {
		if c, ok := moe.RunnableAt(c, local, m); ok && !seen[c.String()] {
			seen[c.String()] = true
			out = append(out, c)
		}
	}
	return out
}

// buildRouting makes the routing of the largest batch (global ids).
func (opt *MoEOptions) buildRouting(maxM int) routing.Routing {
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
func prefix(r routing.Routing, m int) routing.Routing { return r.Tokens(0, m) }

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
// memory) are bad input (badinput.Is). A canceled ctx stops it between batches (on
// the CPU also between samples): it returns the report of the batches done
// so far with ctx's error; the batch in flight is left out. With
// opt.Rounds above 1 the whole sweep repeats (Rounds) and the report
// joins the rounds.
func RunMoE(ctx context.Context, dev gpu.Device, opt MoEOptions) (*MoEReport, error) {
	rep, err := runMoERounds(ctx, dev, opt)
	if rep != nil {
		// Once for the run, not once a batch and round.
		if note := results.BusyHostNote(rep.Results); note != "" {
			rep.Warnings = append(rep.Warnings, note)
		}
	}
	return rep, err
}

func runMoERounds(ctx context.Context, dev gpu.Device, opt MoEOptions) (*MoEReport, error) {
	if opt.Rounds <= 1 {
		rep, err := runMoERound(ctx, dev, opt)
		if rep != nil {
			rep.Rounds = 1
			if err != nil {
				rep.Rounds = 0
			}
		}
		return rep, err
	}
	var rep *MoEReport
	sink := opt.Sink
	joined, done, err := bench.Rounds(opt.Rounds, func(round int) ([]results.Result, error) {
		if round > 0 {
			// The ceilings are measured once (in the first round) and streamed once.
			opt.Sink = func(r results.Result) {
				if r.Name != ceilings.CeilingResult {
					sink.Send(r)
				}
			}
			if sink == nil {
				opt.Sink = nil
			}
		}
		r, err := runMoERound(ctx, dev, opt)
		if r == nil {
			return nil, err
		}
		if rep == nil {
			rep = r
		} else {
			for _, w := range r.Warnings {
				if !slices.Contains(rep.Warnings, w) {
					rep.Warnings = append(rep.Warnings, w)
				}
			}
			rep.Batches = min(rep.Batches, r.Batches)
		}
		// Every round divides by the same ceilings, measured in the first.
		opt.Ceilings = r.Ceilings
		if opt.Tune {
			// Later rounds measure what the first round's tuning chose.
			opt.Tune, opt.tunedInRound = false, tunedConfigs(r.Results)
		}
		return r.Results, err
	})
	if rep == nil || (err != nil && ctx.Err() == nil) {
		return nil, err
	}
	rep.Results, rep.Rounds = joined, done
	// Over-ceiling warnings from the joined medians, the figures the table
	// shows: once a batch, not once a round.
	isOver := func(w string) bool { return strings.Contains(w, ceilings.OverCeilingMark) }
	rep.Warnings = slices.DeleteFunc(rep.Warnings, isOver)
	for i := range rep.Results {
		r := &rep.Results[i]
		if r.Name != MoEResult || rep.Ceilings == nil {
			continue
		}
		m, _ := strconv.Atoi(r.Params["batch"])
		over := overCeilingWarnings(m, *r, rep.Ceilings)
		r.Warnings = append(slices.DeleteFunc(r.Warnings, isOver), over...)
		rep.Warnings = append(rep.Warnings, over...)
	}
	return rep, err
}

// tunedConfigs are the configurations of a tuned round's batch results.
func tunedConfigs(rs []results.Result) map[int]BatchConfig {
	out := map[int]BatchConfig{}
	for _, r := range rs {
		if r.Name != MoEResult || r.Params[MoEConfigSourceParam] != "--tune" {
			continue
		}
		m, err1 := strconv.Atoi(r.Params["batch"])
		c, err2 := moe.ParseConfig(r.Params[MoEConfigParam])
		if err1 == nil && err2 == nil {
			out[m] = BatchConfig{Config: c, Source: "--tune"}
		}
	}
	return out
}

// defaultBatches is the sweep without --batch.
func defaultBatches(onGPU bool) []int {
	if onGPU {
		return DefaultGPUBatches
	}
	return DefaultCPUBatches
}

// runMoERound is one round of RunMoE's sweep.
func runMoERound(ctx context.Context, dev gpu.Device, opt MoEOptions) (*MoEReport, error) {
	local, err := PrepareMoE(&opt)
	if err != nil {
		return nil, err
	}
	info := dev.Info()
	onGPU := info.Backend == gpu.CUDA
	if len(opt.Batches) == 0 {
		opt.Batches = defaultBatches(onGPU)
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

	if onGPU {
		if _, ok := gpu.CUDAOf(dev); !ok {
			return nil, fmt.Errorf("device %s says CUDA but has no CUDA context", info.ID)
		}
		if err := moe.CheckCUDAShape(local); err != nil {
			return nil, badinput.Wrap(err)
		}
	}
	if err := checkFits(dev, local, opt, maxM); err != nil {
		return nil, err
	}

	if opt.Ceilings == nil {
		progress("ceilings")
		c, err := ceilings.MeasureCeilings(ctx, dev, ceilings.CeilingOptions{Quick: true})
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
	opt.Sink.Send(rep.Ceilings.Results()...)
	for _, c := range []*ceilings.Ceiling{&opt.Ceilings.D2D, &opt.Ceilings.GEMM} {
		if !c.Measured() {
			rep.Warnings = append(rep.Warnings, "ceiling unmeasured: "+c.Unmeasured+": percentages of it are unmeasured")
		}
	}

	progress("weights")
	layer := moe.NewLayer(local, opt.Seed)
	rep.Routing = opt.buildRouting(maxM)
	xAll := moe.RandomInput(maxM, local.H, opt.Seed+1)

	configs := opt.tunedInRound
	if onGPU && !opt.Tune && configs == nil {
		var warns []string
		configs, warns, err = ResolveMoEConfigs(local, info, opt.Batches, opt)
		rep.Warnings = append(rep.Warnings, warns...)
		if err != nil {
			return nil, err
		}
	}
	var defines []string
	if opt.Config.Kernel == "tiled" {
		defines = opt.Config.Defines() // a custom tile is part of the base module
	}
	run, err := moe.NewRunner(dev, layer, defines)
	if err != nil {
		return nil, err
	}
	defer run.Close()
	run.WarmUp = settleWarmUp(run.OnGPU())
	run.MinCopies = opt.WeightCopies
	defer func() {
		if !run.OnGPU() && opt.WeightCopies > 1 {
			rep.Warnings = append(rep.Warnings, "--weight-copies: the CPU backend times its one copy of the weights")
		} else if opt.WeightCopies > 1 && run.Copies() < opt.WeightCopies {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("--weight-copies %d: device memory held %d", opt.WeightCopies, run.Copies()))
		}
	}()
	rep.Compile = run.CompileNote
	rep.KernelsID = run.KernelsID

	sampler, stateNote := bench.NewStateSampler(dev)
	defer sampler.Close()
	if stateNote != "" {
		rep.Warnings = append(rep.Warnings, stateNote)
	}
	for _, m := range opt.Batches {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		progress(fmt.Sprintf("M=%d", m))
		batchStart := len(rep.Results)
		r := prefix(rep.Routing, m).Localize(opt.Shape.E, opt.EP, 0)
		x := xAll[:m*local.H]
		tokens := checkTokens(m)
		var want []float64
		var tuned []TuneOutcome
		c := opt.Config
		sampler.Start()
		if opt.Tune { // on the GPU only: the CPU has nothing to tune
			want = moe.ReferenceTokens(layer, x, r, tokens)
			tuned = tune(ctx, run, opt.candidatesOf(tableGPU(info), layer.Shape, r), x, r, tokens, want, opt.TuneSamples, func(s string) { progress(fmt.Sprintf("M=%d %s", m, s)) })
			if err := ctx.Err(); err != nil {
				return rep, err // the batch in flight is left out
			}
			best := pickFastest(tuned)
			if best < 0 {
				return nil, fmt.Errorf("M=%d: --tune: no candidate configuration passed:\n  %s", m, strings.Join(rejections(tuned), "\n  "))
			}
			c = tuned[best].Config
		} else if bc, ok := configs[m]; ok {
			c = bc.Config
		}
		pass, err := run.Run(ctx, x, r, opt.Samples, c, opt.Stages)
		state := sampler.Stop()
		out, us, stages, cfg := pass.Out, pass.US, pass.Stages, pass.Note
		if bc, ok := configs[m]; ok {
			cfg += "; config from " + bc.Source
			if bc.Note != "" {
				cfg += " (" + bc.Note + ")"
			}
		}
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
		res := moeResult(opt, local, m, r, us, rel, cfg, len(tokens))
		if bc, ok := configs[m]; ok {
			res = withConfigSource(res, bc)
		}
		state.Set(&res)
		if note := res.ThrottleNote(); note != "" {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("M=%d: %s", m, note))
		}
		if tuned != nil {
			res = withTuning(opt.staticConfig(tableGPU(info), local, m), res, tuned)
			res.Params[MoEConfigSourceParam] = "--tune"
			for _, o := range tuned {
				rep.Results = append(rep.Results, tuneResult(opt, local, m, o))
			}
		}
		if stages != nil {
			sres := stageResults(opt, local, m, r, stages)
			if cfg, ok := res.Params[MoEConfigParam]; ok {
				for i := range sres {
					sres[i].Params[MoEConfigParam] = cfg // tuned: the configuration that ran
				}
			}
			rep.Results = append(rep.Results, sres...)
		}
		rep.Results = append(rep.Results, res)
		for _, w := range res.Warnings {
			if strings.Contains(w, ceilings.OverCeilingMark) {
				rep.Warnings = append(rep.Warnings, w)
			}
		}
		rep.Batches++
		opt.Sink.Send(rep.Results[batchStart:]...)
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
// "config") and says what it was chosen over (static: the table's pick).
func withTuning(static moe.Config, res results.Result, outs []TuneOutcome) results.Result {
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
	res.Warnings = append(res.Warnings, fmt.Sprintf("tuned over %d candidates (static table: %v): chose %v; others: %s",
		len(outs), static, chosen, strings.Join(others, "; ")))
	return res
}

// tuneResult is one candidate's record: its latency samples (or why it was
// rejected) and its error against the reference.
func tuneResult(opt MoEOptions, local moe.Shape, m int, o TuneOutcome) results.Result {
	p := MoEParams(opt, local, m, "mstar")
	p[MoEConfigParam] = o.Config.String()
	lat := results.Metric{Name: MoETuneLatency, Unit: "µs", Better: results.LowerIsBetter, Samples: o.Latency}
	if len(o.Latency) == 0 {
		lat.Samples = nil
		lat.Unmeasured = "rejected: " + o.Reject
	}
	rel := results.Metric{Name: MoERelL2, Better: results.LowerIsBetter, Samples: []float64{o.RelL2}}
	if math.IsNaN(o.RelL2) || math.IsInf(o.RelL2, 0) {
		rel.Samples = nil
		rel.Unmeasured = "no finite output"
		if o.Reject != "" {
			rel.Unmeasured = o.Reject
		}
	}
	// Candidates are the tuner's exploration, context for the measured batch.
	r := results.Result{Name: MoETuneResult, Params: p, Role: results.RoleContext, Metrics: []results.Metric{lat, rel}}
	if len(o.Gemm1) > 0 && len(o.Gemm2) > 0 {
		r.Metrics = append(r.Metrics,
			results.Metric{Name: MoETuneGemm1, Unit: "µs", Better: results.LowerIsBetter, Samples: o.Gemm1},
			results.Metric{Name: MoETuneGemm2, Unit: "µs", Better: results.LowerIsBetter, Samples: o.Gemm2})
	}
	if len(o.Fresh) > 0 {
		r.Metrics = append(r.Metrics, results.Metric{Name: MoETuneFresh, Unit: "µs", Better: results.LowerIsBetter, Samples: o.Fresh})
	}
	if o.FreshErr != "" {
		r.Warnings = append(r.Warnings, "finalist not timed in a fresh process: "+o.FreshErr)
	}
	if o.Reject != "" {
		r.Warnings = append(r.Warnings, "rejected: "+o.Reject)
	}
	switch {
	case o.Chosen && len(o.Fresh) > 0:
		r.Warnings = append(r.Warnings, "chosen: the fastest finalist in fresh processes")
	case o.Chosen:
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
			cfgs = []moe.Config{opt.staticConfig(tableGPU(dev.Info()), local, maxM)}
		}
		if opt.Tune {
			cfgs = opt.candidates(tableGPU(dev.Info()), local, maxM)
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
		return badinput.Wrap(err)
	}
	return nil
}

// settleWarmUp warms a batch's timing up until it settles. On CUDA: graph
// replays (each a few ms of back-to-back calls) until their device time
// stops improving, for at least 100 ms, so that clocks and power state are
// those of a sustained run; on the CPU: passes, as the harness settles.
func settleWarmUp(onGPU bool) func(call func() (float64, error)) error {
	s := bench.DefaultSettle
	if onGPU {
		s = bench.Settle{MinTime: 100 * time.Millisecond, MaxTime: 3 * time.Second}
	}
	return func(call func() (float64, error)) error {
		_, err := bench.SettleCalls(s, call)
		return err
	}
}

// tune runs every candidate configuration for one batch through the
// shared loop (TuneCandidates): a checked pass and, for those that pass,
// `samples` timed samples. A canceled ctx stops it before the next
// candidate (the caller then drops the batch).
func tune(ctx context.Context, g *moe.Runner, cands []moe.Config, x []float32, r routing.Routing, tokens []int, want []float64, samples int, progress func(string)) []TuneOutcome {
	shape := g.Layer().Shape
	return TuneCandidates(ctx, gpuCandidates{g: g, m: r.M, x: x, r: r}, cands,
		TuneCheck{Tokens: tokens, Want: want, H: shape.H}, samples, progress)
}

// tableGPU is what moe's static table knows of a device: its compute
// capability and multiprocessors.
func tableGPU(i gpu.Info) moe.GPU { return moe.GPU{CC: i.CC(), SMs: i.SMs} }

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
func MoEParams(opt MoEOptions, local moe.Shape, m int, impl string) results.Params {
	model := opt.Model
	if model == "" {
		model = "custom"
	}
	return results.Params{
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
func moeResult(opt MoEOptions, local moe.Shape, m int, r routing.Routing, us []float64, rel float64, cfg string, checked int) results.Result {
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
	metric := func(name, unit string, better results.Direction, samples []float64) results.Metric {
		return results.Metric{Name: name, Unit: unit, Better: better, Samples: samples}
	}
	pct := func(name string, ce ceilings.Ceiling, vals []float64) results.Metric {
		if !ce.Measured() {
			return results.Metric{Name: name, Unit: "%", Better: results.HigherIsBetter, Unmeasured: "ceiling unmeasured: " + ce.Unmeasured}
		}
		out := make([]float64, len(vals))
		for i, v := range vals {
			out[i] = 100 * v / ce.Value
		}
		return metric(name, "%", results.HigherIsBetter, out)
	}
	bw, _, _ := c.Stream()
	floor := results.Metric{Name: MoEPctFloor, Unit: "%", Better: results.HigherIsBetter}
	if bw.Measured() && c.GEMM.Measured() {
		floorSec := math.Max(bytes/(bw.Value*1e9), flops/(c.GEMM.Value*1e12))
		floor.Samples = per(func(s float64) float64 { return 100 * floorSec / s })
	} else {
		floor.Unmeasured = "needs a bandwidth (read or d2d) and the gemm ceiling"
	}
	pass := rel <= MoEMaxRelL2
	gate := results.Gate{Name: MoEGate, Pass: pass,
		// The run table reads the slots, experts and kernels from here
		// (reports.moeTable): they describe the batch, they are not measured.
		Reason: fmt.Sprintf("rel L2 %.3g against the float64 reference on %d of %d tokens (limit %g); %d slots on %d experts; %s",
			rel, checked, m, MoEMaxRelL2, slots, touched, cfg)}
	relMetric := metric(MoERelL2, "", results.LowerIsBetter, []float64{rel})
	if math.IsNaN(rel) || math.IsInf(rel, 0) {
		relMetric = results.Metric{Name: MoERelL2, Better: results.LowerIsBetter, Unmeasured: fmt.Sprintf("output not finite (%v)", rel)}
	}
	res := results.Result{
		Name:   MoEResult,
		Params: MoEParams(opt, local, m, "mstar"),
		Metrics: []results.Metric{
			metric(MoELatency, "µs", results.LowerIsBetter, us),
			metric(MoEThroughput, "TFLOP/s", results.HigherIsBetter, tflops),
			metric(MoEBandwidth, "GB/s", results.HigherIsBetter, gbps),
			pct(MoEPctBW, bw, gbps),
			pct(MoEPctCompute, c.GEMM, tflops),
			floor,
			relMetric,
		},
		Gates: []results.Gate{gate},
	}
	// One measured quantity: the rates and percentages are latency seen
	// through this run's constants and ceilings.
	for i := 1; i <= 5; i++ {
		res.Metrics[i].DerivedFrom = MoELatency
	}
	res.Warnings = append(res.Warnings, overCeilingWarnings(m, res, c)...)
	return res
}

// overCeilingWarnings are a batch result's percentages above 105% of their
// ceilings, from the medians the table and report show. The floor is the
// bytes at the bandwidth ceiling or the flops at the GEMM's, whichever take
// longer, so %floor is always %bw or %compute: one warning names both.
func overCeilingWarnings(m int, res results.Result, c *ceilings.Ceilings) []string {
	median := func(name string) float64 {
		if x := res.Metric(name); x != nil && x.Measured() {
			return results.Median(x.Samples)
		}
		return math.NaN()
	}
	bw, bwName, _ := c.Stream()
	pb, pc := median(MoEPctBW), median(MoEPctCompute)
	bwFig, cFig := "%bw", "%compute"
	if !math.IsNaN(median(MoEPctFloor)) {
		if pb >= pc {
			bwFig += " and %floor"
		} else {
			cFig += " and %floor"
		}
	}
	var out []string
	for _, p := range []struct {
		fig  string
		v    float64
		ce   ceilings.Ceiling
		what string
	}{{bwFig, pb, bw, bwName}, {cFig, pc, c.GEMM, "gemm"}} {
		if w := ceilings.OverCeiling(p.fig, p.v, p.what, p.ce); w != "" {
			out = append(out, fmt.Sprintf("M=%d: %s", m, w))
		}
	}
	return out
}
