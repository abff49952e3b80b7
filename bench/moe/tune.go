package moe

import (
	"cmp"
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

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/bench/ceilings"
	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/doctor"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/routing"
	"github.com/mstar-dev/mstar/reports/results"
)

// MoEConfigSourceParam names where a batch's configuration came from, in
// CUDA results: "--config", "--tune", "static", or a tuned file
// ("cache:NAME" from the user's folder, "embedded:NAME" shipped).
const MoEConfigSourceParam = "config_source"

// CandidateRun is one candidate configuration's pass, kept so that it can
// be timed after its output was checked.
type CandidateRun interface {
	Output() []float32                   // the pass's output, M×H
	Time(samples int) ([]float64, error) // µs per call
	Free()
}

// CandidateRunner runs candidate configurations over one batch whose
// inputs it holds: the CUDA kernels, the CPU's one implementation, or a
// test's.
type CandidateRunner interface {
	// Prepare compiles c's kernels and says how ("" when there is nothing
	// to compile).
	Prepare(c moe.Config) (string, error)
	// Run makes one pass of c on NaN-poisoned output buffers.
	Run(c moe.Config) (CandidateRun, error)
}

// TuneCheck is what a candidate's output is held to: the float64
// reference on the checked tokens.
type TuneCheck struct {
	Tokens []int
	Want   []float64
	H      int
}

// GEMMTimer is a CandidateRun that can also time its two GEMMs alone (the
// CUDA kernels): the tuner then tries the split configuration made of the
// fastest gemm1 and the fastest gemm2.
type GEMMTimer interface {
	TimeGEMMs(samples int) (gemm1, gemm2 []float64, err error) // µs per call
}

// ProgrammaticRunner is a CandidateRunner that can launch kernels with
// programmatic dependent launch (Config.PL): the tuner then tries the best
// configuration with each GEMM launched so.
type ProgrammaticRunner interface {
	ProgrammaticLaunch() bool
}

// SelfAlignRunner is a CandidateRunner whose batch can run gemm1 with the
// alignment fused in (moe.SelfAligning: a tc gemm1, 64 slots or fewer): the
// tuner then tries the fastest configuration so, one launch fewer.
type SelfAlignRunner interface {
	SelfAligning(c moe.Config) (moe.Config, bool)
}

// TrafficRunner is a CandidateRunner whose kernels can move a wg GEMM's
// gathered rows in other ways (moe.TrafficVariants: the L2 window, mc=2
// clusters): the tuner then tries the fastest configuration with each, and
// the fastest of those with theirs (a window on one GEMM, a cluster on the
// other).
type TrafficRunner interface {
	TrafficVariants(c moe.Config) []moe.Config
}

// TuneCandidates runs every candidate: a pass on poisoned buffers checked
// against the reference (an element never written, a non-finite one, or rel
// L2 above MoEMaxRelL2 rejects it, with the reason), and for those that
// pass, `samples` timed samples. Where the runs time their GEMMs alone and
// the fastest gemm1 and gemm2 come from different candidates, their split
// configuration is tried next, checked and timed like the others (each
// GEMM's best tile differs: N = 2I by K = H against N = H by K = I). Where
// the runner can fuse the alignment into a tc gemm1, the fastest so far is
// tried so (SelfAlignRunner), and where a wg GEMM can keep its gathered
// rows in an L2 window or share them in a cluster, with those, twice
// (TrafficRunner). Where the runner has programmatic launches, the fastest so far is tried last
// with gemm1's, gemm2's and both GEMMs' kernels launched so (pl=1): whether
// the early start pays depends on the kernels and the batch. A canceled ctx
// stops it before the next candidate.
func TuneCandidates(ctx context.Context, run CandidateRunner, cands []moe.Config, chk TuneCheck, samples int, progress func(string)) []TuneOutcome {
	outs := make([]TuneOutcome, 0, len(cands)+1)
	for i, c := range cands {
		if ctx.Err() != nil {
			return outs
		}
		if progress != nil {
			progress(fmt.Sprintf("tune %d/%d %v", i+1, len(cands), c))
		}
		outs = append(outs, tuneOne(run, c, chk, samples))
	}
	for _, split := range bestSplits(outs) {
		if ctx.Err() != nil {
			break
		}
		if progress != nil {
			progress(fmt.Sprintf("tune split %v", split))
		}
		outs = append(outs, tuneOne(run, split, chk, samples))
	}
	if sr, ok := run.(SelfAlignRunner); ok && ctx.Err() == nil {
		if best := fastestOutcome(outs); best >= 0 {
			if v, ok := sr.SelfAligning(outs[best].Config); ok && !timedAlready(outs, v) {
				if progress != nil {
					progress(fmt.Sprintf("tune self-aligning %v", v))
				}
				outs = append(outs, tuneOne(run, v, chk, samples))
			}
		}
	}
	if tr, ok := run.(TrafficRunner); ok {
		// Two rounds: the fastest's twins, then the new fastest's (a
		// window on one GEMM and a cluster on the other).
		for round := 0; round < 2 && ctx.Err() == nil; round++ {
			best := fastestOutcome(outs)
			if best < 0 {
				break
			}
			tried := 0
			for _, v := range tr.TrafficVariants(outs[best].Config) {
				if ctx.Err() != nil {
					return outs
				}
				if timedAlready(outs, v) {
					continue
				}
				if progress != nil {
					progress(fmt.Sprintf("tune traffic twin %v", v))
				}
				outs = append(outs, tuneOne(run, v, chk, samples))
				tried++
			}
			if tried == 0 {
				break
			}
		}
	}
	if pr, ok := run.(ProgrammaticRunner); ok && pr.ProgrammaticLaunch() {
		for _, c := range launchVariants(outs) {
			if ctx.Err() != nil {
				return outs
			}
			if progress != nil {
				progress(fmt.Sprintf("tune launch %v", c))
			}
			outs = append(outs, tuneOne(run, c, chk, samples))
		}
	}
	return outs
}

// launchVariants is the fastest eligible outcome's configuration with the
// other three ways of launching its GEMMs (plain or programmatic each),
// leaving out any already timed.
func launchVariants(outs []TuneOutcome) []moe.Config {
	timed := map[string]bool{}
	for _, o := range outs {
		timed[o.Config.String()] = true
	}
	best := fastestOutcome(outs)
	if best < 0 {
		return nil
	}
	c := outs[best].Config
	var vs []moe.Config
	for _, pl := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		v := c.WithProgrammatic(pl[0], pl[1])
		if !timed[v.String()] {
			timed[v.String()] = true
			vs = append(vs, v)
		}
	}
	return vs
}

// fastestOutcome is the index of the passing outcome with the lowest median
// latency, -1 when none passed.
func fastestOutcome(outs []TuneOutcome) int {
	best := -1
	for i, o := range outs {
		if o.Reject != "" || len(o.Latency) == 0 || !(o.RelL2 <= MoEMaxRelL2) {
			continue
		}
		if best < 0 || o.Median() < outs[best].Median() {
			best = i
		}
	}
	return best
}

// timedAlready says whether c is among the outcomes.
func timedAlready(outs []TuneOutcome, c moe.Config) bool {
	for _, o := range outs {
		if o.Config.String() == c.String() {
			return true
		}
	}
	return false
}

func tuneOne(run CandidateRunner, c moe.Config, chk TuneCheck, samples int) TuneOutcome {
	o := TuneOutcome{Config: c, RelL2: math.NaN()}
	note, err := run.Prepare(c)
	if err != nil {
		o.Reject = "compile: " + firstLine(err.Error())
		return o
	}
	o.Compile = note
	p, err := run.Run(c)
	if err != nil {
		o.Reject = firstLine(err.Error())
		return o
	}
	defer p.Free()
	out := p.Output()
	if len(out) < len(chk.Tokens)*chk.H || (len(chk.Tokens) > 0 && len(out) <= chk.Tokens[len(chk.Tokens)-1]*chk.H) {
		o.Reject = fmt.Sprintf("output has %d elements, too few for the batch", len(out))
		return o
	}
	o.RelL2 = moe.RelL2(checkedRows(out, chk.Tokens, chk.H), chk.Want)
	if i := firstNonFinite(out); i >= 0 {
		o.Reject = fmt.Sprintf("out[%d] (token %d, column %d) is %v: never written or not finite", i, i/chk.H, i%chk.H, out[i])
		return o
	}
	if !(o.RelL2 <= MoEMaxRelL2) {
		o.Reject = fmt.Sprintf("rel L2 %.3g > %g against the float64 reference", o.RelL2, MoEMaxRelL2)
		return o
	}
	us, err := p.Time(samples)
	if err != nil {
		o.Reject = firstLine(err.Error())
		return o
	}
	o.Latency = us
	if gt, ok := p.(GEMMTimer); ok && !c.IsSplit() {
		// A failure here only leaves the candidate out of the split.
		o.Gemm1, o.Gemm2, _ = gt.TimeGEMMs(samples)
	}
	return o
}

// bestSplits are the splits worth timing from the eligible candidates'
// GEMM times (medians): the fastest gemm1 with the fastest gemm2; and,
// because a GEMM timed alone does not pay for the alignment launch that a
// gemm2 on other token blocks adds to the pass, the fastest gemm1 with the
// fastest gemm2 on its blocks, and the fastest gemm2 with the fastest gemm1
// on its blocks. Each at most once, none timed already, none that is one
// candidate's own pair. A split may be a single configuration: two skinny
// candidates that differ only in their warps per GEMM combine into one.
func bestSplits(outs []TuneOutcome) []moe.Config {
	// fastest is the eligible outcome with the smallest median of the
	// GEMM's times among those whose other GEMM could share its blocks.
	fastest := func(gemm int, block int) int {
		best, m := -1, math.Inf(1)
		for i, o := range outs {
			if o.Reject != "" || len(o.Latency) == 0 || len(o.Gemm1) == 0 || len(o.Gemm2) == 0 {
				continue
			}
			if block > 0 && o.Config.Gemm(gemm).Block() != block {
				continue
			}
			t := o.Gemm1
			if gemm == 2 {
				t = o.Gemm2
			}
			if v := results.Summarize(t).Median; v < m {
				best, m = i, v
			}
		}
		return best
	}
	b1, b2 := fastest(1, 0), fastest(2, 0)
	if b1 < 0 || b2 < 0 {
		return nil
	}
	pairs := [][2]int{{b1, b2},
		{b1, fastest(2, outs[b1].Config.Gemm(1).Block())},
		{fastest(1, outs[b2].Config.Gemm(2).Block()), b2}}
	var out []moe.Config
	for _, p := range pairs {
		if p[0] < 0 || p[1] < 0 || p[0] == p[1] {
			continue
		}
		c := moe.Split(outs[p[0]].Config, outs[p[1]].Config)
		if timedAlready(outs, c) || slices.ContainsFunc(out, func(o moe.Config) bool { return o.String() == c.String() }) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// gpuCandidates runs candidates through the CUDA kernels.
type gpuCandidates struct {
	g *moe.Runner
	m int
	x []float32
	r routing.Routing
}

func (a gpuCandidates) ProgrammaticLaunch() bool { return a.g.ProgrammaticLaunch() }

func (a gpuCandidates) SelfAligning(c moe.Config) (moe.Config, bool) {
	return moe.SelfAligning(c, a.g.Layer().Shape, a.m)
}

func (a gpuCandidates) TrafficVariants(c moe.Config) []moe.Config {
	return moe.TrafficVariants(c, a.g.Layer().Shape, a.m)
}

func (a gpuCandidates) Prepare(c moe.Config) (string, error) {
	res, err := a.g.Compile(c)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s, cache hit %v, %.2f s", res.Kind, res.CacheHit, res.Seconds), nil
}

func (a gpuCandidates) Run(c moe.Config) (CandidateRun, error) {
	p, out, err := a.g.CheckedPass(a.x, a.r, c)
	if err != nil {
		return nil, err
	}
	return &gpuCandidateRun{a: a, p: p, out: out}, nil
}

type gpuCandidateRun struct {
	a   gpuCandidates
	p   *moe.Plan
	out []float32
}

func (r *gpuCandidateRun) Output() []float32 { return r.out }
func (r *gpuCandidateRun) Free()             { r.p.Free() }
func (r *gpuCandidateRun) Time(samples int) ([]float64, error) {
	us, _, err := r.a.g.Time(r.p, r.a.r, samples)
	return us, err
}

func (r *gpuCandidateRun) TimeGEMMs(samples int) (gemm1, gemm2 []float64, err error) {
	st, err := r.a.g.Stages(r.p, r.a.r, samples)
	if err != nil {
		return nil, nil, err
	}
	var align, combine []float64
	for _, s := range st {
		switch s.Stage {
		case "align":
			align = s.US
		case "gemm1":
			gemm1 = s.US
		case "gemm2":
			gemm2 = s.US
		case "combine":
			combine = s.US
		}
	}
	// Each GEMM with the launch it may fuse: gemm1 with the alignment (a
	// self-aligning gemm1 has no align stage; where gemm2 aligns on its own,
	// that goes to gemm1 too), gemm2 with the combine (a fused-combine gemm2
	// has none), so a split is judged on what each GEMM leaves to do.
	addSamples(gemm1, align)
	addSamples(gemm2, combine)
	return gemm1, gemm2, nil
}

// addSamples adds a stage's samples to another's, sample by sample; a
// stage that did not run (no samples) adds nothing.
func addSamples(to, extra []float64) {
	if len(extra) != len(to) {
		return
	}
	for i := range to {
		to[i] += extra[i]
	}
}

// cpuCandidates is the CPU's one implementation (moe.ForwardCPU) as a
// runner of the one candidate, the empty Config.
type cpuCandidates struct {
	ctx context.Context
	g   *moe.Runner
	x   []float32
	r   routing.Routing
}

func (a cpuCandidates) Prepare(moe.Config) (string, error) { return "", nil }

func (a cpuCandidates) Run(c moe.Config) (CandidateRun, error) {
	if c.Kernel != "" {
		return nil, fmt.Errorf("config %v: the CPU has one implementation", c)
	}
	out := make([]float32, a.r.M*a.g.Layer().Shape.H)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	if _, err := a.g.Forward(a.x, a.r, out); err != nil {
		return nil, err
	}
	return &cpuCandidateRun{a: a, out: out}, nil
}

type cpuCandidateRun struct {
	a   cpuCandidates
	out []float32
}

func (r *cpuCandidateRun) Output() []float32 { return r.out }
func (r *cpuCandidateRun) Free()             {}
func (r *cpuCandidateRun) Time(samples int) ([]float64, error) {
	scratch := make([]float32, len(r.out))
	sec, err := bench.TimeWall(bench.Timing{Samples: samples}, func() error {
		if err := r.a.ctx.Err(); err != nil {
			return err
		}
		_, err := r.a.g.Forward(r.a.x, r.a.r, scratch)
		return err
	})
	us := make([]float64, len(sec))
	for i, s := range sec {
		us[i] = s * 1e6
	}
	return us, err
}

// BatchConfig is the configuration one batch runs with, and where it came from.
type BatchConfig struct {
	Config moe.Config // never empty: the static table's pick is spelled out
	Source string     // MoEConfigSourceParam's value
	Note   string     // when the file lacked the batch: what was used instead
}

// ResolveMoEConfigs picks each batch's configuration on the device dev:
// --config for all, else the tuned file for the local shape and dev's name
// (opt.ConfigLookup, by default the user's folder then the shipped files),
// else the static table for dev's compute capability. Warnings say which
// file was used, or why none.
func ResolveMoEConfigs(local moe.Shape, dev gpu.Info, batches []int, opt MoEOptions) (map[int]BatchConfig, []string, error) {
	out := make(map[int]BatchConfig, len(batches))
	if opt.Config.Kernel != "" {
		for _, m := range batches {
			out[m] = BatchConfig{Config: opt.Config, Source: "--config"}
		}
		return out, nil, nil
	}
	static := func(note string) {
		for _, m := range batches {
			out[m] = BatchConfig{Config: opt.staticConfig(tableGPU(dev), local, m), Source: "static", Note: note}
		}
	}
	if opt.StaticConfigs {
		static("")
		return out, nil, nil
	}
	lookup := moe.DefaultTunedLookup()
	if opt.ConfigLookup != nil {
		lookup = *opt.ConfigLookup
	}
	key := moe.KeyFor(local, dev.Name)
	f, where, warns, err := lookup.Find(key)
	if err != nil {
		return nil, warns, err
	}
	if f == nil {
		looked := "the shipped files"
		if len(lookup.Dirs) > 0 {
			looked = strings.Join(lookup.Dirs, ", ") + " and " + looked
		}
		warns = append(warns, fmt.Sprintf("no tuned config file %s (looked in %s): the static table; %s makes one", key.FileName(), looked, tuneCommand(opt.routingName(), opt.EP, nil)))
		static("")
		return out, warns, nil
	}
	src := "embedded:" + key.FileName()
	if strings.HasPrefix(where, "file ") {
		src = "cache:" + key.FileName()
	}
	warns = append(warns, fmt.Sprintf("kernel configurations from the tuned %s (%d batches, updated %s)", where, f.Len(), f.Updated.Format("2006-01-02")))
	run := opt.tunedRouting()
	var uniformPicks []int // under a skewed run: batches that take a uniform pick
	for _, m := range batches {
		p := f.PickFor(local, m, run)
		from := src
		if p.Routing != moe.Uniform && p.Routing != "" {
			from += " [" + p.Routing + "]"
		}
		if moe.IsUniformKey(p.Routing) && !moe.IsUniformKey(run) && p.Config.Kernel != "" {
			uniformPicks = append(uniformPicks, m)
		}
		switch {
		case p.Config.Kernel == "" && p.Exact:
			out[m] = BatchConfig{Config: opt.staticConfig(tableGPU(dev), local, m), Source: "static", Note: "the tuned file says auto: static table"}
		case p.Config.Kernel == "":
			out[m] = BatchConfig{Config: opt.staticConfig(tableGPU(dev), local, m), Source: "static", Note: p.Note}
		default:
			out[m] = BatchConfig{Config: p.Config, Source: from, Note: p.Note}
		}
	}
	if w := routingMismatch(uniformPicks, opt.routingName(), opt.EP); w != "" {
		warns = append(warns, w)
	}
	return out, warns, nil
}

// routingMismatch says that batches ms of a run under routing run (over ep
// expert-parallel ranks) take picks tuned under uniform routing (the file
// has none of run's for them), and how to tune them for it: a skewed
// routing can want other tiles (on an H100 under zipf:1.2, deepseek-v3 tp8
// M=256 ran 2.8% and qwen3-30b-a3b M=256 1.9% faster with picks tuned under
// it than with the uniform ones, reports/measured/h100/moe-zipf-picks/).
func routingMismatch(ms []int, run string, ep int) string {
	if len(ms) == 0 {
		return ""
	}
	return fmt.Sprintf("M=%s take picks tuned under uniform routing, run under %s: %s tunes them for it",
		moe.JoinBatches(ms), run, tuneCommand(run, ep, ms))
}

// tuneCommand is the tune moe command line, quoted, that tunes batches ms
// (all of them when none) under routing run over ep ranks: the static
// table chooses by the uniform mean load, which a skewed routing's hot
// experts exceed (on an H100 under a replayed trace, qwen3-30b-a3b M=256
// read 0.98× triton-ref on it, reports/measured/h100/moe-trace/).
func tuneCommand(run string, ep int, ms []int) string {
	cmd := "mstar tune moe"
	switch {
	case strings.HasPrefix(run, "trace:"):
		cmd += " --routing-file " + strings.TrimPrefix(run, "trace:")
	case run != moe.Uniform:
		cmd += " --routing " + run
	}
	if ep > 1 {
		cmd += fmt.Sprintf(" --ep %d", ep)
	}
	if len(ms) > 0 {
		cmd += " --batch " + moe.JoinBatches(ms)
	}
	return "'" + cmd + "'"
}

// withConfigSource names a batch's configuration and its source in its
// result (params "config" and "config_source").
func withConfigSource(res results.Result, bc BatchConfig) results.Result {
	res.Params[MoEConfigParam] = bc.Config.String()
	res.Params[MoEConfigSourceParam] = bc.Source
	if bc.Note != "" {
		res.Warnings = append(res.Warnings, "config: "+bc.Note)
	}
	return res
}

// MoETuneOptions configure `tune moe`.
type MoETuneOptions struct {
	// MoE: the shape, sharding, batches, routing and seed; Samples is the
	// comparison's samples per batch, TuneSamples each candidate's.
	MoE   MoEOptions
	Dir   string // where the tuned file is read from and written to
	Force bool   // re-tune batches already in the file
	// Commit names this build in the file's provenance.
	Commit string
	// Rounds of the comparison, each sweeping the static table then the
	// file (0: 2); the diff pools the rounds of each side.
	Rounds int
	Now    func() time.Time // nil: time.Now
	// Runner, when set, replaces the device's own candidates for batch m
	// (tests: a candidate that returns wrong numbers must be rejected).
	Runner func(m int, l *moe.Layer, x []float32, r routing.Routing) (CandidateRunner, []moe.Config)
	// Candidates, when set, is the candidate list of batch m (nil: the
	// device's, on CUDA): what a CUDA tune runs, and, before any weights
	// are made, what decides whether a batch in the file met this build's
	// candidates (a Runner's list should be the same).
	Candidates func(m int) []moe.Config
	// Earlier is the document an earlier, interrupted run wrote to the same
	// --out: the candidates of the batches this run skips are carried from
	// it, so a resumed tune's document still holds every batch's candidates.
	Earlier *results.Document
	// Finalists (with Fresh): the fastest candidates, up to this many within
	// FinalistGap of the fastest, are timed again in new processes, as bench
	// moe will run them, FreshRounds (0: 2) times each, alternated, and the
	// pick is the fastest there (0 or 1: the tuner's own times decide).
	Finalists   int
	FreshRounds int
	Fresh       FreshTimer
	// Shortlist, when set, is an earlier tune's document of the same shape
	// (any kernels): a batch it holds tries only the static pick, the
	// candidates it did not time, and the ShortlistKeep (0: 6) fastest of
	// the rest there by pass, by gemm1 and by gemm2 alone; a batch it lacks
	// tries every candidate. After a kernel change it cuts a re-tune to
	// about 60% of the candidates (v29's over v25's documents).
	Shortlist     *results.Document
	ShortlistKeep int
}

// DefaultShortlistKeep is ShortlistKeep's default: on the H200 tunings of
// the four reference shapes, every pick of a re-tune after a kernel change
// was among the earlier tune's six fastest by pass or by one GEMM.
const DefaultShortlistKeep = 6

// FreshTimer times configuration c at batch m in a new process, as bench
// moe runs it there (a new context, a new upload of the weights, which land
// elsewhere), with ceil as its ceilings: the run's median latency, µs.
type FreshTimer interface {
	TimeFresh(ctx context.Context, m int, c moe.Config, ceil *ceilings.Ceilings) (float64, error)
}

// FinalistGap: candidates within this fraction of the fastest in the
// tuner's process are finalists. Fresh processes on the H200 have read one
// configuration up to 7% from the tuner's time and two configurations 1.6%
// apart in the other order (kernels/moe/NOTES.md, tenth session).
const FinalistGap = 0.05

// MaxFinalists bounds --finalists: each costs FreshRounds processes a batch.
const MaxFinalists = 8

// finalistsOf is the eligible candidates within gap of the fastest, fastest
// first, at most n.
func finalistsOf(outs []TuneOutcome, n int, gap float64) []int {
	var idx []int
	for i, o := range outs {
		if o.Reject == "" && len(o.Latency) > 0 && o.RelL2 <= MoEMaxRelL2 {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(outs[a].Median(), outs[b].Median()) })
	best := outs[idx[0]].Median()
	var fin []int
	for _, i := range idx {
		if len(fin) < n && outs[i].Median() <= best*(1+gap) {
			fin = append(fin, i)
		}
	}
	return fin
}

// finalistNote is how a finalist read in fresh processes, for the tuned file.
func (o TuneOutcome) finalistNote() string {
	if o.FreshErr != "" && len(o.Fresh) == 0 {
		return fmt.Sprintf("%v: not timed (%s)", o.Config, o.FreshErr)
	}
	per := make([]string, len(o.Fresh))
	for i, v := range o.Fresh {
		per[i] = strconv.FormatFloat(round3(v), 'f', -1, 64)
	}
	note := fmt.Sprintf("%v: %.3f µs (%s; in the tuner %.3f)", o.Config, results.Median(o.Fresh), strings.Join(per, ", "), o.Median())
	if o.FreshErr != "" {
		note += "; then failed: " + o.FreshErr
	}
	return note
}

// judgeFinalists times each finalist rounds times through timeFresh, the
// order rotated every round so that none always runs first, and records
// the times in outs[i].Fresh. It returns the finalist with the lowest
// median there (-1 when none was timed every round) and what went wrong.
// A canceled ctx stops it between runs.
func judgeFinalists(ctx context.Context, outs []TuneOutcome, fin []int, rounds int, timeFresh func(moe.Config) (float64, error), progress func(string)) (int, []string) {
	var warns []string
	for r := range rounds {
		for k := range fin {
			if ctx.Err() != nil {
				return -1, warns
			}
			i := fin[(k+r)%len(fin)]
			if outs[i].FreshErr != "" {
				continue
			}
			if progress != nil {
				progress(fmt.Sprintf("fresh %d/%d %v", r*len(fin)+k+1, rounds*len(fin), outs[i].Config))
			}
			us, err := timeFresh(outs[i].Config)
			if err == nil && !(us > 0) {
				err = fmt.Errorf("no latency (%v)", us)
			}
			if err != nil {
				outs[i].FreshErr = firstLine(err.Error())
				warns = append(warns, fmt.Sprintf("finalist %v: not timed in a fresh process: %s", outs[i].Config, outs[i].FreshErr))
				continue
			}
			outs[i].Fresh = append(outs[i].Fresh, us)
		}
	}
	best := -1
	for _, i := range fin {
		if len(outs[i].Fresh) < rounds {
			continue
		}
		if best < 0 || results.Median(outs[i].Fresh) < results.Median(outs[best].Fresh) {
			best = i
		}
	}
	return best, warns
}

// MoETuneReport is what a tune produced.
type MoETuneReport struct {
	Key      moe.TunedKey
	Path     string // the file written
	Routing  string // the key its batches are kept under in the file (moe.TunedRouting)
	File     *moe.TunedFile
	Tuned    []int // batches measured this run
	Skipped  []int // batches already in the file
	Outcomes map[int][]TuneOutcome
	// Static and TunedRun are the comparison's last two sweeps, the static
	// table against the file; StaticDocs and TunedDocs hold every round of
	// each side (latency keyed without the configuration), for report diff.
	Static, TunedRun      *MoEReport
	StaticDocs, TunedDocs []*results.Document
	Results               []results.Result // every candidate, and both sweeps (param "configs")
	Warnings              []string
	// NoCandidate lists the batches where every candidate was rejected.
	NoCandidate []int
}

// ErrNoCandidate: at some batch every candidate failed its check.
var ErrNoCandidate = errors.New("no candidate configuration passed")

// RunMoETune tunes each batch of opt.MoE.Batches for the local shape on
// dev: every candidate checked against the float64 reference, the correct
// ones timed, the fastest written to the tuned file in opt.Dir — after each
// batch, so that an interrupted tune resumes where it stopped (batches
// already in the file are skipped unless opt.Force). It ends by measuring
// the static table against the file over every batch (as bench moe does)
// and diffing them with report diff's statistics. A canceled ctx stops it
// between candidates; the file keeps the batches done.
func RunMoETune(ctx context.Context, dev gpu.Device, opt MoETuneOptions) (*MoETuneReport, error) {
	mo := opt.MoE
	mo.Tune, mo.Config, mo.Stages = false, moe.Config{}, false
	// The tune streams its own records (each batch's candidates, each
	// comparison sweep as the document keeps it), not the sweeps' raw ones.
	sink := mo.Sink
	mo.Sink = nil
	local, err := PrepareMoE(&mo)
	if err != nil {
		return nil, err
	}
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	info := dev.Info()
	onGPU := info.Backend == gpu.CUDA
	if len(mo.Batches) == 0 {
		mo.Batches = defaultBatches(onGPU)
	}
	if mo.TuneSamples == 0 {
		mo.TuneSamples = 6
	}
	progress := func(s string) {
		if mo.Progress != nil {
			mo.Progress(s)
		}
	}
	rep := &MoETuneReport{Key: moe.KeyFor(local, info.Name), Routing: mo.tunedRouting(), Outcomes: map[int][]TuneOutcome{}}
	if opt.Dir == "" {
		return nil, errors.New("tune moe: no folder for the tuned file")
	}
	rep.Path = filepath.Join(opt.Dir, rep.Key.FileName())

	// Resume: the batches the file has for these kernels.
	f, _, warns, err := moe.TunedLookup{Dirs: []string{opt.Dir}}.Find(rep.Key)
	if err != nil {
		return nil, badinput.Wrap(err)
	}
	rep.Warnings = append(rep.Warnings, warns...)
	if fi, err := os.Lstat(rep.Path); err == nil && !fi.Mode().IsRegular() {
		return nil, badinput.Errorf("tune moe: %s is %s, where the tuned file goes: move it", rep.Path, doctor.FileKind(fi.Mode()))
	}
	if f == nil {
		// A file the tune cannot resume from would be overwritten by the
		// first batch: unless it is only another build's (replaced by
		// design), it is kept beside, for whoever wrote it by hand.
		if b, err := os.ReadFile(rep.Path); err == nil {
			if old, perr := moe.ParseTunedFile(b, rep.Path); perr != nil || old.Key() != rep.Key {
				kept, err := keepAside(rep.Path)
				if err != nil {
					return nil, badinput.Errorf("tune moe: %s is not a tuned file for %v, and moving it aside failed (%v): move it, then run again", rep.Path, rep.Key, err)
				}
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("moved %s, which is not a tuned file for %v, to %s: a new file is written in its place", rep.Path, rep.Key, kept))
			}
		}
	}
	if f == nil || opt.Force {
		if f != nil {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("--force: re-tuning M=%s under %s routing in %s (its other batches stay)", moe.JoinBatches(mo.Batches), rep.Routing, rep.Path))
		} else if len(warns) > 0 {
			rep.Warnings = append(rep.Warnings, "starting a new "+rep.Path)
		}
		nf := moe.NewTunedFile(rep.Key, now())
		if f != nil && opt.Force {
			// Batches not re-tuned this run stay, every routing's.
			nf.Batches, nf.Routings = f.Batches, f.Routings
			nf.Created = f.Created
		}
		f = nf
	}
	if !onGPU {
		f.Note = "cpu: one implementation (moe.ForwardCPU); bench moe does not read this file"
	}
	// The file is written with this build's version; the batches it keeps
	// from an earlier one name their own (TunedBatch.Kernels).
	f.KernelVersion = moe.KernelVersion
	rep.File = f

	// A batch tuned before this build's candidates for it (a kernel family
	// added since, gv=1 say) names other kernels than they would
	// (moe.BatchKernels): it is still valid, but it never met them, so it
	// is tuned again. Not on the CPU, which tunes one implementation.
	candidatesOf := opt.Candidates
	if candidatesOf == nil && onGPU {
		candidatesOf = func(m int) []moe.Config { return mo.candidates(tableGPU(info), local, m) }
	}
	// Batches are resumed, and kept, per routing: a skewed tune adds its
	// picks beside the uniform ones.
	run := rep.Routing
	tunedKernels := func(m int) string { b, _ := f.Get(m, run); return b.Kernels }
	var todo, stale []int
	for _, m := range mo.Batches {
		if slices.Contains(todo, m) || slices.Contains(rep.Skipped, m) {
			continue
		}
		switch {
		case f.Has(m, run) && !opt.Force && candidatesOf != nil && tunedKernels(m) != moe.BatchKernels(candidatesOf(m)):
			stale = append(stale, m)
			todo = append(todo, m)
		case f.Has(m, run) && !opt.Force:
			rep.Skipped = append(rep.Skipped, m)
		default:
			todo = append(todo, m)
		}
	}
	if len(stale) > 0 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("re-tuning M=%s: tuned before this build's candidates for them (kernels %s, now %s)",
			moe.JoinBatches(stale), tunedKernels(stale[0]), moe.BatchKernels(candidatesOf(stale[0]))))
	}
	if opt.Shortlist != nil && len(todo) > 0 {
		// Another shape's (or routing's, or seed's) document is almost
		// surely the wrong file: refused before the weights go up. Batches
		// it lacks are said one by one, and run every candidate.
		want, have := shapeKey(MoEParams(mo, local, todo[0], "mstar")), tunedShapesIn(opt.Shortlist)
		if !slices.Contains(have, want) {
			return nil, badinput.Wrap(fmt.Errorf("--shortlist: the document holds no candidates of this run (%s); it has %s",
				want, describeShapes(have)))
		}
	}
	if len(rep.Skipped) > 0 {
		rep.Warnings = append(rep.Warnings, "already in the file, not re-tuned (--force re-tunes): M="+moe.JoinBatches(rep.Skipped))
		if carried, from := earlierCandidates(opt.Earlier, mo, local, rep.Skipped); len(carried) > 0 {
			rep.Results = append(rep.Results, carried...)
			sink.Send(carried...)
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%d candidate record(s) of M=%s carried from the earlier run's document", len(carried), moe.JoinBatches(from)))
		}
	}

	// The ceilings the comparison's sweeps (and fresh finalists) report
	// against: measured once, when first needed.
	needCeilings := func() error {
		if mo.Ceilings != nil {
			return nil
		}
		progress("ceilings")
		c, err := ceilings.MeasureCeilings(ctx, dev, ceilings.CeilingOptions{Quick: true})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("measuring ceilings: %w", err)
		}
		mo.Ceilings = c
		return nil
	}
	var gk, cpuRun *moe.Runner
	defer func() {
		if gk != nil {
			gk.Close()
		}
	}()
	if len(todo) > 0 {
		if onGPU {
			if err := moe.CheckCUDAShape(local); err != nil {
				return nil, badinput.Wrap(err)
			}
			maxM := slices.Max(todo)
			to := mo
			to.Tune = true
			if err := checkFits(dev, local, to, maxM); err != nil {
				return nil, err
			}
			progress("weights")
			layer := moe.NewLayer(local, mo.Seed)
			if gk, err = moe.NewRunner(dev, layer, nil); err != nil {
				return nil, err
			}
			// Candidates are timed as bench moe times a pass, after the
			// settled warm-up: timed cool (one warm replay, after a
			// compile), large-M candidates ran up to 12% faster than bench
			// then measured them, and the pick went by the cool time
			// (qwen3-30b-a3b M=4096 on the H200, 2026-12-03).
			gk.WarmUp = settleWarmUp(true)
			gk.MinCopies = mo.WeightCopies
		} else if err := checkFits(dev, local, mo, slices.Max(todo)); err != nil {
			return nil, err
		}
	}
	var layer *moe.Layer
	if gk != nil {
		layer = gk.Layer()
	} else if len(todo) > 0 {
		layer = moe.NewLayer(local, mo.Seed)
	}
	maxAll := slices.Max(mo.Batches)
	routing := mo.buildRouting(maxAll)
	var xAll []float32
	if len(todo) > 0 {
		xAll = moe.RandomInput(maxAll, local.H, mo.Seed+1)
	}
	for _, m := range todo {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		progress(fmt.Sprintf("M=%d", m))
		r := prefix(routing, m).Localize(mo.Shape.E, mo.EP, 0)
		x := xAll[:m*local.H]
		tokens := checkTokens(m)
		chk := TuneCheck{Tokens: tokens, Want: moe.ReferenceTokens(layer, x, r, tokens), H: local.H}
		var runner CandidateRunner
		var cands []moe.Config
		switch {
		case opt.Runner != nil:
			runner, cands = opt.Runner(m, layer, x, r)
		case onGPU:
			runner, cands = gpuCandidates{g: gk, m: m, x: x, r: r}, candidatesOf(m)
		default:
			if cpuRun == nil {
				if cpuRun, err = moe.NewRunner(dev, layer, nil); err != nil {
					return rep, err
				}
				defer cpuRun.Close()
				// Candidates are timed after the settled warm-up bench moe
				// uses, as on the GPU (without it they read 17–42% slow).
				cpuRun.WarmUp = settleWarmUp(false)
			}
			runner, cands = cpuCandidates{ctx: ctx, g: cpuRun, x: x, r: r}, []moe.Config{{}}
		}
		// The batch's kernels are those of every candidate, not only of
		// the shortlist's: the version the next run checks it against.
		kernels := moe.BatchKernels(cands)
		if opt.Shortlist != nil {
			recs := candidateRecords(opt.Shortlist, mo, local, m)
			if len(recs) == 0 {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("M=%d: not in the shortlist document: every candidate runs", m))
			} else {
				cands = shortlisted(cands, recs, opt.ShortlistKeep)
			}
		}
		outs := TuneCandidates(ctx, runner, cands, chk, mo.TuneSamples, func(s string) { progress(fmt.Sprintf("M=%d %s", m, s)) })
		if err := ctx.Err(); err != nil {
			return rep, err // the batch in flight is left out of the file
		}
		best := pickFastest(outs) // before the results: the chosen one says so
		if fin := finalistsOf(outs, opt.Finalists, FinalistGap); len(fin) > 1 && opt.Fresh != nil {
			if err := needCeilings(); err != nil {
				return rep, err
			}
			rounds := opt.FreshRounds
			if rounds <= 0 {
				rounds = 2
			}
			nb, warns := judgeFinalists(ctx, outs, fin, rounds, func(c moe.Config) (float64, error) {
				return opt.Fresh.TimeFresh(ctx, m, c, mo.Ceilings)
			}, func(s string) { progress(fmt.Sprintf("M=%d %s", m, s)) })
			if err := ctx.Err(); err != nil {
				return rep, err // the batch in flight is left out of the file
			}
			for _, w := range warns {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("M=%d: %s", m, w))
			}
			if nb < 0 {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("M=%d: no finalist was timed in every fresh round: the tuner's own fastest stays", m))
			} else if nb != best {
				outs[best].Chosen, outs[nb].Chosen = false, true
				best = nb
			}
		}
		rep.Outcomes[m] = outs
		static := moe.Config{}.String()
		if onGPU || opt.Runner != nil {
			static = mo.staticConfig(tableGPU(info), local, m).String()
		}
		first := len(rep.Results)
		for i, o := range outs {
			r := tuneResult(mo, local, m, o)
			if i == best {
				// The run table names the static table's pick beside the chosen one.
				r.Warnings = append(r.Warnings, TuneStaticNote+static)
			}
			rep.Results = append(rep.Results, r)
		}
		sink.Send(rep.Results[first:]...) // a kill from here on keeps this batch's candidates
		if best < 0 {
			rep.NoCandidate = append(rep.NoCandidate, m)
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("M=%d: no candidate passed:\n  %s", m, strings.Join(rejections(outs), "\n  ")))
			continue
		}
		b := moe.TunedBatch{Config: outs[best].Config.String(), LatencyUS: round3(outs[best].Median()), Candidates: len(outs),
			Date: now().UTC().Truncate(time.Second), Commit: opt.Commit, Routing: rep.Routing, Kernels: kernels}
		for _, v := range outs[best].Latency {
			b.Samples = append(b.Samples, round3(v))
		}
		if len(outs[best].Fresh) > 0 {
			b.FreshUS = round3(results.Median(outs[best].Fresh))
		}
		for _, o := range outs {
			if len(o.Fresh) > 0 || o.FreshErr != "" {
				b.Finalists = append(b.Finalists, o.finalistNote())
			}
		}
		b.Static = static
		for _, o := range outs {
			if o.Config.String() == b.Static && len(o.Latency) > 0 {
				b.StaticUS = round3(o.Median())
			}
			if o.Reject != "" {
				b.Rejected = append(b.Rejected, fmt.Sprintf("%v: %s", o.Config, o.Reject))
			}
		}
		f.Set(m, b)
		if rep.Path, err = moe.WriteTunedFile(opt.Dir, f); err != nil {
			return rep, err
		}
		rep.Tuned = append(rep.Tuned, m)
		progress(fmt.Sprintf("saved M=%d", m))
	}
	if len(rep.Tuned) == 0 && len(rep.NoCandidate) == 0 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("every batch was already in %s: nothing tuned (--force re-tunes)", rep.Path))
	}
	if gk != nil {
		gk.Close() // the comparison makes its own
		gk = nil
	}

	// Tuned versus the static table, each a bench moe sweep over every batch.
	if err := needCeilings(); err != nil {
		return rep, err
	}
	base, tuned := mo, mo
	base.StaticConfigs = true
	tuned.ConfigLookup = &moe.TunedLookup{Dirs: []string{opt.Dir}}
	// Interleaved rounds, pooled per side: the diff then sees some of the
	// noise between sweeps, not only the noise within one.
	rounds := opt.Rounds
	if rounds <= 0 {
		rounds = 2
	}
	if rounds == 1 {
		rep.Warnings = append(rep.Warnings, "--rounds 1: the comparison sees no noise between sweeps, so a shift of a sweep's level (a busy host, another draw of the weights' placement) can read as a change; 2 or more rounds see it")
	}
	var docs [2][]*results.Document
	for round := range rounds {
		type sweep struct {
			i    int
			name string
			opt  MoEOptions
			dst  **MoEReport
		}
		order := []sweep{{0, "static", base, &rep.Static}, {1, "tuned", tuned, &rep.TunedRun}}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0] // neither side always runs second
		}
		for _, side := range order {
			i := side.i
			progress(fmt.Sprintf("compare %s %d/%d", side.name, round+1, rounds))
			r, err := RunMoE(ctx, dev, side.opt)
			if err != nil {
				return rep, err
			}
			*side.dst = r
			doc := &results.Document{Format: results.Format, Schema: results.SchemaVersion, Suite: "tune moe"}
			docs[i] = append(docs[i], doc)
			first := len(rep.Results)
			rep.compareSide(side.name, round, r, doc)
			sink.Send(rep.Results[first:]...)
		}
	}
	rep.StaticDocs, rep.TunedDocs = docs[0], docs[1]
	if onGPU { // on the CPU there is no placement to draw: a gap is the host's noise
		rep.Warnings = append(rep.Warnings, SweepGaps(rep.File, rep.Routing, rep.TunedDocs, TuneSweepGap)...)
	}
	if len(rep.NoCandidate) > 0 {
		return rep, fmt.Errorf("%w at M=%s", ErrNoCandidate, moe.JoinBatches(rep.NoCandidate))
	}
	return rep, nil
}

// keepAside renames path to path.bad (path.bad.2, … when taken) and
// returns the new name.
func keepAside(path string) (string, error) {
	for i := 1; i < 100; i++ {
		to := path + ".bad"
		if i > 1 {
			to += "." + strconv.Itoa(i)
		}
		if _, err := os.Lstat(to); err == nil {
			continue
		}
		if err := os.Rename(path, to); err != nil {
			return "", errors.Unwrap(err)
		}
		return to, nil
	}
	return "", errors.New("99 earlier copies are there already")
}

// TuneSweepGap is how far (a fraction) the tuned sweep's median may read
// from the pick's time as a candidate before the tune says so: at small M on
// the H200 the two have read 7% apart for one configuration in one process
// (kernels/moe/NOTES.md), and bench moe in a fresh process has read the
// sweep's level or further off still, never the candidate's.
const TuneSweepGap = 0.03

// SweepGaps names the batches whose tuned-sweep latency (the median over
// the rounds of docs) reads more than gap from the file's candidate time,
// their sample ranges apart, as warnings, in batch order.
func SweepGaps(f *moe.TunedFile, routing string, docs []*results.Document, gap float64) []string {
	if f == nil {
		return nil
	}
	sweep := map[int][]float64{}
	for _, d := range docs {
		for _, r := range d.Results {
			m, err := strconv.Atoi(r.Params["batch"])
			if lat := r.Metric(MoELatency); err == nil && lat != nil {
				sweep[m] = append(sweep[m], lat.Samples...)
			}
		}
	}
	var out []string
	for _, m := range f.TunedBatchSizesUnder(routing) {
		b, _ := f.Get(m, routing)
		if b.LatencyUS <= 0 || len(sweep[m]) == 0 {
			continue
		}
		got := results.Median(sweep[m])
		// Noisy timings (a busy CPU) overlap and say nothing: only two
		// sample ranges apart by more than gap are two levels.
		clo, chi := minMax(b.Samples)
		slo, shi := minMax(sweep[m])
		apart := len(b.Samples) == 0 || chi < slo || shi < clo
		if d := got/b.LatencyUS - 1; math.Abs(d) > gap && apart {
			out = append(out, fmt.Sprintf("M=%d: %s timed %.1f µs as a candidate and %.1f µs in the tuned sweep (%+.1f%%): "+
				"a new runner does not reproduce the candidate's level, so the pick may rest on one draw of the weights' placement (kernels/moe/NOTES.md)",
				m, b.Config, b.LatencyUS, got, 100*d))
		}
	}
	return out
}

func minMax(v []float64) (lo, hi float64) {
	if len(v) == 0 {
		return 0, 0
	}
	return slices.Min(v), slices.Max(v)
}

// compareSide records one sweep of the comparison: its results (param
// "configs" names the side, "round" the round) and, in doc, their latency
// keyed without the configuration, so that the two sides pair by batch.
func (rep *MoETuneReport) compareSide(name string, round int, r *MoEReport, doc *results.Document) {
	for _, res := range r.Results {
		if res.Name != MoEResult {
			continue
		}
		kept := res
		kept.Params = paramsWithout(res.Params)
		kept.Params["configs"] = name
		kept.Params["round"] = strconv.Itoa(round + 1)
		rep.Results = append(rep.Results, kept)
		// The two sides pair by batch: their configurations differ by
		// design, and only latency gets a verdict.
		cmp := results.Result{Name: res.Name, Params: paramsWithout(res.Params, MoEConfigParam, MoEConfigSourceParam)}
		if lat := res.Metric(MoELatency); lat != nil {
			cmp.Metrics = []results.Metric{*lat}
		}
		doc.Results = append(doc.Results, cmp)
	}
	for _, w := range r.Warnings {
		if !slices.Contains(rep.Warnings, w) {
			rep.Warnings = append(rep.Warnings, w)
		}
	}
}

// round3 keeps a timing's nanoseconds: the file is read by people too.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// earlierCandidates picks from an earlier tune document the candidate
// records of the skipped batches: same kernels, same parameters (shape,
// sharding, routing, seed) but for the configuration. It returns them and
// the batches they cover.
func earlierCandidates(doc *results.Document, mo MoEOptions, local moe.Shape, skipped []int) ([]results.Result, []int) {
	if doc == nil || doc.Suite != "tune moe" || doc.Env[EnvKernelsVersion] != moe.KernelVersion {
		return nil, nil
	}
	byKey := map[string][]results.Result{}
	for _, r := range doc.Results {
		if r.Name == MoETuneResult {
			k := results.Result{Name: r.Name, Params: paramsWithout(r.Params, MoEConfigParam)}.Key()
			byKey[k] = append(byKey[k], r)
		}
	}
	var out []results.Result
	var from []int
	for _, m := range skipped {
		if rs := byKey[results.Result{Name: MoETuneResult, Params: MoEParams(mo, local, m, "mstar")}.Key()]; len(rs) > 0 {
			out = append(out, rs...)
			from = append(from, m)
		}
	}
	return out, from
}

// paramsWithout is a copy of p without the given keys.
func paramsWithout(p results.Params, drop ...string) results.Params {
	out := make(results.Params, len(p))
	for k, v := range p {
		if !slices.Contains(drop, k) {
			out[k] = v
		}
	}
	return out
}
