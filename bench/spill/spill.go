// Package spill is the spill matrix: scenarios × tiers × sizes, each cell a
// real spill/restore exercise on a device pool with hard gates.
//
// Scenarios (rows):
//
//	hibernate      the whole pool to the tier and back; the device memory is
//	               freed in between, so the bytes live only in the tier
//	partial        25, 50 and 75% of the blocks spilled, the freed device
//	               memory overwritten by another tenant, then restored
//	restore-gate   compute may start only once the restore is verified; a
//	               deliberately short restore must be caught, with the bytes
//	               that arrived (measured), never the bytes requested
//	uneven         shards of unequal size spilled and restored concurrently
//	ping-pong      two models take turns owning a budget that holds one and
//	               a layer; each one's transfer overlaps the other's compute,
//	               priced as max(0, transfer − overlapped compute); predicted
//	               against measured
//	multi-session  sessions spill and restore concurrently in random
//	               interleavings through one shared tier
//	ladder         the regulator driven by ramp, spike and oscillating demand,
//	               spilling to pinned memory and then to this tier
//	abort          a spill cancelled mid-flight: its slots are stranded bytes
//	               until a TTL reclaims them, reported as measured, never zero
//	co-residency   tenants share one device budget: cold releases (each source
//	               reports what it gave; silence is stranded), hot grows
//	               (read back), unfundable asks refused with the arithmetic,
//	               floor refusals not retried smaller, freed bytes claimed
//
// Tiers (columns): see package tier. Gates in every cell where they apply:
// byte-identical restore (hash of every block before and after), reached ==
// requested (measured by read-back), no stranded bytes at the end,
// "unmeasured" kept distinct from zero in every figure, and bandwidth not
// below Floor × the tier's ceiling measured in the same run (the same
// blocks moved and timed the same way, with nothing around them). Scenario
// gates are listed with each scenario's code.
package spill

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/spill/regulator"
	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

// Scenario names a row of the matrix.
type Scenario string

const (
	Hibernate    Scenario = "hibernate"
	Partial      Scenario = "partial"
	RestoreGate  Scenario = "restore-gate"
	Uneven       Scenario = "uneven"
	PingPong     Scenario = "ping-pong"
	MultiSession Scenario = "multi-session"
	Ladder       Scenario = "ladder"
	Abort        Scenario = "abort"
	CoResidency  Scenario = "co-residency"
)

// Scenarios lists every row, in order.
var Scenarios = []Scenario{Hibernate, Partial, RestoreGate, Uneven, PingPong, MultiSession, Ladder, Abort, CoResidency}

// Cell is one scenario on one tier at one pool size.
type Cell struct {
	Scenario Scenario
	Tier     tier.Kind
	Size     int64
}

// Name is "scenario/tier/size", what --cells patterns match.
func (c Cell) Name() string {
	return fmt.Sprintf("%s/%s/%s", c.Scenario, c.Tier, units.Size(c.Size, ""))
}

// Applicable says whether the cell makes sense, and why not.
func (c Cell) Applicable() (bool, string) {
	if c.Scenario == Ladder && (c.Tier == tier.Device || c.Tier == tier.Pinned) {
		return false, "the ladder spills to pinned first; its column names the deeper tier (pageable, file, peer)"
	}
	return true, ""
}

// Cells returns every applicable cell of scenarios × tiers × sizes.
func Cells(scenarios []Scenario, tiers []tier.Kind, sizes []int64) []Cell {
	var out []Cell
	for _, size := range sizes {
		for _, s := range scenarios {
			for _, t := range tiers {
				c := Cell{s, t, size}
				if ok, _ := c.Applicable(); ok {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// Match keeps the cells whose name matches any of the comma-separated
// patterns. A pattern is a path.Match glob over "scenario/tier/size" with
// missing trailing parts matching anything: "hibernate", "*/pinned",
// "ping-pong/file/64MiB", "ladder,abort/pageable".
func Match(cells []Cell, patterns string) ([]Cell, error) {
	if strings.TrimSpace(patterns) == "" {
		return cells, nil
	}
	var pats []string
	for _, p := range strings.Split(patterns, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		for strings.Count(p, "/") < 2 {
			p += "/*"
		}
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("bad cell pattern %q: %w", p, err)
		}
		pats = append(pats, p)
	}
	var out []Cell
	for _, c := range cells {
		for _, p := range pats {
			if ok, _ := path.Match(p, c.Name()); ok {
				out = append(out, c)
				break
			}
		}
	}
	if len(out) == 0 {
		eg := "hibernate/pinned/64MiB"
		if len(cells) > 0 {
			eg = cells[0].Name()
		}
		return nil, fmt.Errorf("no cell matches %q (cells are scenario/tier/size, e.g. %s)", patterns, eg)
	}
	return out, nil
}

// ParseScenarios parses a comma-separated list of scenario names.
func ParseScenarios(s string) ([]Scenario, error) {
	var out []Scenario
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		found := false
		for _, sc := range Scenarios {
			if string(sc) == f {
				out, found = append(out, sc), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown scenario %q", f)
		}
	}
	return out, nil
}

// ParseSizes parses a comma-separated list of sizes.
func ParseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		n, err := units.Parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no sizes")
	}
	return out, nil
}

// Config tunes a run.
type Config struct {
	Dev     gpu.Device
	Sink    results.Sink // each cell's results, as soon as the cell is done
	Blocks  int          // blocks per pool; 0 means 16
	Samples int          // timed repetitions of a bandwidth figure; 0 means 5
	Floor   float64      // bandwidth floor as a fraction of the tier ceiling; 0 means 0.5
	// HibernatePinnedFloor is the floor of hibernate through pinned memory,
	// the path the H200 target names; 0 means 0.9 on CUDA and Floor on the
	// CPU backend (where copies share two cores with everything else).
	HibernatePinnedFloor float64
	// PingPongTol bounds |predicted − measured| / measured; 0 means 0.10 on
	// CUDA and 0.25 on the CPU backend, where compute and copies share two
	// cores with everything else on the machine.
	PingPongTol float64
	Faults      tier.Faults
	ShmDir      string // "" means tier.DefaultShmDir()
	Holder      tier.Holder
	Trace       regulator.Tracer // ladder ticks; nil: none
	Seed        uint64
	TTL         time.Duration // stranded-slot TTL; 0 means 50 ms
	Interval    time.Duration // regulator tick; 0 means 20 ms
	Cooldown    int           // regulator cooldown in ticks; 0 means 8
	Sessions    int           // multi-session sessions; 0 means 4

	mut mutations        // tests only
	now func() time.Time // tests only: the host clock of timed moves; nil: time.Now
}

// mutations break a cell's own logic on purpose, so that tests can show
// each scenario gate catching the bug it exists for. Only tests set them.
type mutations struct {
	tenantNoWrite     bool // partial: the other tenant does not overwrite the freed blocks
	computeUnverified bool // restore-gate: compute starts whether or not the restore verified
	quoteRequested    bool // restore-gate: a refusal quotes the bytes requested, not measured
	serialSessions    bool // multi-session: sessions run one after another
	truncateCurves    bool // ladder: the demand curves stop halfway, at high demand
	noCooldown        bool // ladder: the regulator runs with a cooldown of one tick
	strandNothing     bool // abort: the cancelled spill's slots are not put in the ledger
	reclaimEarly      bool // abort: reclaim ignores the TTL
	silentAsZero      bool // co-residency: a source that said nothing counts as a delivered zero
	shortGrow         bool // co-residency: a grow comes back a block short and reports the request
	partialDraw       bool // co-residency: an unfundable ask draws what is free instead of refusing
	retrySmaller      bool // co-residency: a release refused at the floor is retried smaller
	leaveHole         bool // co-residency: a tenant claims less than another freed
	slowCalibration   bool // ladder: the calibrated moves as slow as a loaded machine's, so the interval stretches to 30 ms
}

func (c *Config) defaults() error {
	if c.Dev == nil {
		return errors.New("spill: no device")
	}
	// Only 0 means the default: a negative count or time is refused, not
	// quietly replaced.
	switch {
	case c.Blocks < 0 || c.Samples < 0 || c.Sessions < 0 || c.Cooldown < 0:
		return fmt.Errorf("spill: blocks %d, samples %d, sessions %d, cooldown %d: none may be negative", c.Blocks, c.Samples, c.Sessions, c.Cooldown)
	case c.TTL < 0 || c.Interval < 0:
		return fmt.Errorf("spill: TTL %v, interval %v: neither may be negative", c.TTL, c.Interval)
	case c.Floor < 0 || c.HibernatePinnedFloor < 0 || c.PingPongTol < 0:
		return fmt.Errorf("spill: floor %v, hibernate-pinned floor %v, ping-pong tolerance %v: none may be negative", c.Floor, c.HibernatePinnedFloor, c.PingPongTol)
	}
	if c.Blocks == 0 {
		c.Blocks = 16
	}
	if c.Samples == 0 {
		c.Samples = 5
	}
	if c.Floor == 0 {
		c.Floor = 0.5
	}
	if c.HibernatePinnedFloor == 0 {
		c.HibernatePinnedFloor = c.Floor
		if c.Dev.Info().Backend == gpu.CUDA {
			c.HibernatePinnedFloor = max(c.Floor, 0.9)
		}
	}
	if c.PingPongTol == 0 {
		c.PingPongTol = 0.25
		if c.Dev.Info().Backend == gpu.CUDA {
			c.PingPongTol = 0.10
		}
	}
	if c.ShmDir == "" {
		c.ShmDir = tier.DefaultShmDir()
	}
	if c.Seed == 0 {
		c.Seed = 0x5eed
	}
	if c.TTL == 0 {
		c.TTL = 50 * time.Millisecond
	}
	if c.Interval == 0 {
		c.Interval = 20 * time.Millisecond
	}
	if c.Cooldown == 0 {
		c.Cooldown = 8
	}
	if c.Sessions == 0 {
		c.Sessions = 4
	}
	return nil
}

// CheckLayout refuses, before anything runs, cells whose pool cannot be
// cut into blocks larger than a block's 8-byte header: --sizes too small
// for --blocks (--blocks 1000000000 was refused only after the ceilings
// were measured). It computes, and allocates, nothing per block.
func CheckLayout(cells []Cell, blocks int) error {
	if bad := SmallLayouts(cells, blocks); len(bad) > 0 {
		return badinput.Errorf("pool layouts with blocks of 8 bytes or less: %s", strings.Join(bad, ", "))
	}
	return nil
}

// SmallLayouts names the cells whose layout CheckLayout refuses.
func SmallLayouts(cells []Cell, blocks int) []string {
	if blocks <= 0 {
		blocks = 16
	}
	var total int64
	for _, s := range shardShares {
		total += s
	}
	var bad []string
	for _, c := range cells {
		smallest := c.Size / int64(blocks)
		if c.Scenario == Uneven {
			shard := c.Size * shardShares[0] / total / 4096 * 4096
			n := max(1, shard/max(64<<10, c.Size/int64(blocks)))
			smallest = shard / n
		}
		if smallest <= 8 {
			bad = append(bad, c.Name())
		}
	}
	return bad
}

// CheckFits refuses, before any cell runs, sizes whose pool and its copy in
// the tier cannot both fit (gpu.CheckFits): the pool in device memory, the
// copy in device memory for the device tier, in host memory for the others
// but files; on the CPU backend device memory is host memory.
func CheckFits(dev gpu.Device, cells []Cell) error {
	cpu := dev.Info().Backend != gpu.CUDA
	var onDev, onHost, size int64
	for _, c := range cells {
		d, h := c.Size, int64(0)
		switch c.Tier {
		case tier.Device:
			d += c.Size
		case tier.File:
		default:
			h = c.Size
		}
		if cpu {
			d, h = 0, d+h
		}
		if d > onDev || h > onHost {
			size = max(size, c.Size)
		}
		onDev, onHost = max(onDev, d), max(onHost, h)
	}
	what := "--sizes " + units.Bytes(size) + " (the pool and its copy in the tier)"
	for _, n := range []struct {
		d    gpu.Device
		need int64
	}{{dev, onDev}, {gpu.NewCPU(), onHost}} {
		if n.need == 0 {
			continue
		}
		if err := gpu.CheckFits(n.d, what, n.need, "try smaller --sizes"); err != nil {
			return err
		}
	}
	return nil
}

// Outcome is one cell's run.
type Outcome struct {
	Cell    Cell
	Results []results.Result
	Err     error // the cell could not run at all
	Took    time.Duration
}

// Passed reports whether the cell ran and every gate of every result passed.
func (o Outcome) Passed() bool {
	if o.Err != nil || len(o.Results) == 0 {
		return false
	}
	for _, r := range o.Results {
		if !r.Passed() {
			return false
		}
	}
	return true
}

// Failures lists the failing gates as "gate: reason".
func (o Outcome) Failures() []string {
	var out []string
	if o.Err != nil {
		out = append(out, "error: "+o.Err.Error())
	}
	for _, r := range o.Results {
		for _, g := range r.Gates {
			if g.Failed() {
				out = append(out, g.Name+": "+g.Reason)
			}
		}
	}
	return out
}

// Undecided lists the gates that could not tell, as "gate: reason".
func (o Outcome) Undecided() []string {
	var out []string
	for _, r := range o.Results {
		for _, g := range r.Gates {
			if g.Undecided {
				out = append(out, g.Name+": "+g.Reason)
			}
		}
	}
	return out
}

// Run runs the cells in order. progress, when set, is called before each.
// The error is for a run that could not start; failing cells are outcomes.
// A canceled ctx stops it: the cell in flight is dropped (not recorded as
// failing), and the cells done so far are returned with ctx's error.
func Run(ctx context.Context, cfg Config, cells []Cell, progress func(i int, c Cell)) (*Matrix, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, ceilings: map[ceilKey]*Ceiling{}}
	m := &Matrix{Config: cfg}
	// Each cell's results carry the machine's state while it ran: the GPU's
	// (on a GPU) and how busy the host was.
	sampler, _ := bench.NewStateSampler(cfg.Dev)
	defer sampler.Close()
	for i, c := range cells {
		if ctx.Err() != nil {
			break
		}
		if progress != nil {
			progress(i, c)
		}
		start := time.Now()
		sampler.Start()
		o := r.runCell(ctx, c)
		state := sampler.Stop()
		for j := range o.Results {
			state.Set(&o.Results[j])
		}
		o.Took = time.Since(start)
		if err := ctx.Err(); err != nil {
			// Interrupted inside the cell: its figures and gates are of a
			// cell cut short, neither a pass nor a failure. It is dropped.
			break
		}
		m.Outcomes = append(m.Outcomes, o)
		cfg.Sink.Send(o.results()...)
	}
	for _, k := range r.order {
		m.Ceilings = append(m.Ceilings, *r.ceilings[k])
		cfg.Sink.Send(r.ceilings[k].Result())
	}
	return m, ctx.Err()
}

type runner struct {
	cfg      Config
	ceilings map[ceilKey]*Ceiling
	order    []ceilKey
}

func (r *runner) runCell(ctx context.Context, c Cell) (o Outcome) {
	o.Cell = c
	if ok, why := c.Applicable(); !ok {
		o.Err = errors.New("not applicable: " + why)
		return o
	}
	defer func() {
		// A cell that panics is a failed cell, not a crashed run.
		if p := recover(); p != nil {
			o.Err = fmt.Errorf("panic: %v", p)
		}
	}()
	var fn func(context.Context, *cellEnv) error
	switch c.Scenario {
	case Hibernate:
		fn = runHibernate
	case Partial:
		fn = runPartial
	case RestoreGate:
		fn = runRestoreGate
	case Uneven:
		fn = runUneven
	case PingPong:
		fn = runPingPong
	case MultiSession:
		fn = runMultiSession
	case Ladder:
		fn = runLadder
	case Abort:
		fn = runAbort
	case CoResidency:
		fn = runCoResidency
	default:
		o.Err = fmt.Errorf("unknown scenario %q", c.Scenario)
		return o
	}
	env, err := r.newEnv(c)
	if err != nil {
		o.Err = err
		return o
	}
	defer env.close()
	err = fn(ctx, env)
	o.Results = env.results
	if err != nil {
		o.Err = err
	}
	return o
}

// cellEnv is what a scenario runs with.
type cellEnv struct {
	cfg     *Config
	cell    Cell
	dev     gpu.Device
	s       gpu.Stream
	r       *runner
	closers []func() error
	results []results.Result
}

func (r *runner) newEnv(c Cell) (*cellEnv, error) {
	s, err := r.cfg.Dev.NewStream()
	if err != nil {
		return nil, err
	}
	e := &cellEnv{cfg: &r.cfg, cell: c, dev: r.cfg.Dev, s: s, r: r}
	e.closers = append(e.closers, s.Close)
	return e, nil
}

func (e *cellEnv) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// openTier opens a tier of kind with capacity, with the run's faults, and
// closes it with the cell.
func (e *cellEnv) openTier(kind tier.Kind, capacity int64, chunk int64) (tier.Tier, error) {
	t, err := tier.Open(kind, tier.Options{Dev: e.dev, Capacity: capacity, Chunk: chunk, ShmDir: e.cfg.ShmDir, Holder: e.cfg.Holder})
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, t.Close)
	return tier.Inject(t, e.cfg.Faults), nil
}

// pool makes a pool of blocks, filled with the cell's seed, closed with the cell.
func (e *cellEnv) pool(lens []int64, seed uint64) (*tier.Pool, []uint64, error) {
	p, err := tier.NewPool(e.dev, lens)
	if err != nil {
		return nil, nil, err
	}
	e.closers = append(e.closers, p.Close)
	if err := p.FillAll(e.s, seed); err != nil {
		return nil, nil, err
	}
	h, err := p.Hashes(e.s)
	return p, h, err
}

// params are a result's parameters: the cell's plus extras.
func (e *cellEnv) params(kv ...string) results.Params {
	p := results.Params{"scenario": string(e.cell.Scenario), "tier": string(e.cell.Tier), "size": units.Size(e.cell.Size, "")}
	for i := 0; i+1 < len(kv); i += 2 {
		p[kv[i]] = kv[i+1]
	}
	return p
}

// add appends a result, with the unmeasured-distinct gate checked last.
func (e *cellEnv) add(r results.Result) {
	r.Gates = append(r.Gates, GateUnmeasured(r.Metrics))
	e.results = append(e.results, r)
}

// ceil measures (once per run) the tier's ceiling for the cell's pool in
// its blocks (hibernate, restore-gate).
func (e *cellEnv) ceil(ctx context.Context) *Ceiling {
	return e.ceilFor(ctx, e.cell.Size, [][]int64{tier.EvenBlocks(e.cell.Size, e.cfg.Blocks)})
}

// ceilFor is the cell tier's ceiling for moves of the same blocks as the
// cell's (layout: per stream, its blocks' lengths), measured by the same
// path (the cell's batched moves, one slot per block, one wait per lane)
// with nothing else around them. On a CPU a 4 MiB block that stays in a
// cache moves faster than one 64 MiB copy: a ceiling of one contiguous
// slot was not an upper bound for the cells (file and peer at 117–275%).
// A move of part of the pool is held to a ceiling of its own size: on
// device memory (about 2 TB/s) a copy's fixed costs weigh far more on
// 64 MiB than on 256 MiB, and that is the link, not the cell's design.
func (e *cellEnv) ceilFor(ctx context.Context, size int64, layout [][]int64) *Ceiling {
	k := ceilKey{Tier: e.cell.Tier, Size: size, Shards: fmt.Sprint(layout)}
	if c, ok := e.r.ceilings[k]; ok {
		return c
	}
	c := measureCeiling(ctx, e.r.cfg, e.cell.Tier, size, layout)
	e.r.ceilings[k] = &c
	e.r.order = append(e.r.order, k)
	return &c
}
