package moe

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/kernels/routing"
)

// Source is the CUDA C source of the kernels (moe.cu), compiled at run time.
//
//go:embed moe.cu
var Source string

// Kernels is moe.cu compiled and loaded on one CUDA context: the base
// module (alignment, combine, skinny and tiled kernels) and, made when a
// plan first needs one, a small module per tc configuration.
type Kernels struct {
	ctx     *cuda.Context
	comp    *cuda.Compiler
	base    *kmodule
	mods    map[string]*kmodule // tc modules by their options
	Compile *cuda.CompileResult // how the base module was made (cache hit, seconds)
	// The persisting L2 set-aside held for plans with l2=4 windows: set
	// when the first such plan is made, given back when the last is freed.
	persist struct {
		sync.Mutex
		plans int
		bytes int64
	}
}

type kmodule struct {
	mod *cuda.Module
	fns map[string]*cuda.Function
	res *cuda.CompileResult
}

// CompileKernels compiles moe.cu (through the NVRTC disk cache) with the
// given extra options (e.g. a custom tile's Defines) and loads it.
func CompileKernels(ctx *cuda.Context, opts []string) (*Kernels, error) {
	comp, err := ctx.Compiler()
	if err != nil {
		return nil, fmt.Errorf("compiling moe.cu: %w", err)
	}
	k := &Kernels{ctx: ctx, comp: comp, mods: map[string]*kmodule{}}
	if k.base, err = k.compile(opts); err != nil {
		return nil, err
	}
	k.Compile = k.base.res
	return k, nil
}

func (k *Kernels) compile(opts []string) (*kmodule, error) {
	all := append([]string{"-std=c++17"}, opts...)
	mod, res, err := k.ctx.CompileModule(k.comp, Source, "moe.cu", all)
	if err != nil {
		return nil, fmt.Errorf("compiling moe.cu: %w", err)
	}
	return &kmodule{mod: mod, fns: map[string]*cuda.Function{}, res: res}, nil
}

// Module compiles and loads the module that holds c's kernels (the base
// module unless c is a tc configuration) and says how it was made; for a
// split configuration both GEMMs' modules (the seconds summed, a cache hit
// only when both were).
func (k *Kernels) Module(c Config) (*cuda.CompileResult, error) {
	m, err := k.module(c.Gemm(1))
	if err != nil {
		return nil, err
	}
	if !c.IsSplit() {
		return m.res, nil
	}
	m2, err := k.module(c.Gemm(2))
	if err != nil {
		return nil, err
	}
	res := *m2.res
	res.Seconds += m.res.Seconds
	res.CacheHit = res.CacheHit && m.res.CacheHit
	return &res, nil
}

func (k *Kernels) module(c Config) (*kmodule, error) {
	if c.Kernel != "tc" && c.Kernel != "wg" {
		return k.base, nil
	}
	if c.Kernel == "wg" && k.ctx.Props().CCMajor != 9 {
		return nil, fmt.Errorf("config %v: the wg kernels need a Hopper GPU (sm_90a); this one is sm_%d%d", c, k.ctx.Props().CCMajor, k.ctx.Props().CCMinor)
	}
	key := strings.Join(c.Defines(), " ")
	if m, ok := k.mods[key]; ok {
		return m, nil
	}
	m, err := k.compile(c.Defines())
	if err != nil {
		return nil, fmt.Errorf("config %v: %w", c, err)
	}
	k.mods[key] = m
	return m, nil
}

// Close unloads the modules.
func (k *Kernels) Close() error {
	errs := []error{k.base.mod.Unload()}
	for _, m := range k.mods {
		errs = append(errs, m.mod.Unload())
	}
	return errors.Join(errs...)
}

func (m *kmodule) fn(name string, smem int) (*cuda.Function, error) {
	if f, ok := m.fns[name]; ok {
		return f, nil
	}
	f, err := m.mod.Function(name)
	if err != nil {
		return nil, err
	}
	if smem > 48*1024 {
		if err := f.SetMaxDynamicSharedMemory(smem); err != nil {
			return nil, err
		}
	}
	m.fns[name] = f
	return f, nil
}

// DeviceWeights is one copy of a layer's weights in device memory.
type DeviceWeights struct {
	ctx    *cuda.Context
	W1, W2 cuda.DevicePtr
}

func u16bytes(v []uint16) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 2*len(v))
}

// UploadWeights copies the layer's weights to the device.
func UploadWeights(ctx *cuda.Context, l *Layer) (*DeviceWeights, error) {
	w := &DeviceWeights{ctx: ctx}
	var err error
	if w.W1, err = ctx.Alloc(int64(2 * len(l.W1))); err != nil {
		return nil, err
	}
	if w.W2, err = ctx.Alloc(int64(2 * len(l.W2))); err != nil {
		ctx.Free(w.W1)
		return nil, err
	}
	if err := ctx.MemcpyHtoD(w.W1, u16bytes(l.W1)); err != nil {
		w.Free()
		return nil, err
	}
	if err := ctx.MemcpyHtoD(w.W2, u16bytes(l.W2)); err != nil {
		w.Free()
		return nil, err
	}
	return w, nil
}

// Clone makes another device copy (weights rotate among copies when the
// touched experts would otherwise sit in L2 between timed calls).
func (w *DeviceWeights) Clone(s Shape) (*DeviceWeights, error) {
	n1, n2 := int64(s.E)*2*int64(s.I)*int64(s.H)*2, int64(s.E)*int64(s.H)*int64(s.I)*2
	c := &DeviceWeights{ctx: w.ctx}
	var err error
	if c.W1, err = w.ctx.Alloc(n1); err != nil {
		return nil, err
	}
	if c.W2, err = w.ctx.Alloc(n2); err != nil {
		w.ctx.Free(c.W1)
		return nil, err
	}
	if err := w.ctx.MemcpyDtoD(c.W1, w.W1, n1); err != nil {
		c.Free()
		return nil, err
	}
	if err := w.ctx.MemcpyDtoD(c.W2, w.W2, n2); err != nil {
		c.Free()
		return nil, err
	}
	return c, nil
}

// Free releases the copy.
func (w *DeviceWeights) Free() error {
	return errors.Join(w.ctx.Free(w.W1), w.ctx.Free(w.W2))
}

// Plan is one batch size's buffers and launches on a device.
type Plan struct {
	k      *Kernels
	Shape  Shape
	M      int
	Config Config
	// Resident is how many blocks of each tc GEMM run at once (its
	// persistent grid); zero for the other families.
	Resident [2]int
	// WarmUp, when set, replaces the one untimed graph replay before
	// TimeGraph's and TimeStages' samples: it is given a function that
	// replays once and returns the replay's device time in seconds, and
	// calls it until the timing has settled (bench.Settle).
	WarmUp func(replay func() (float64, error)) error
	layout planLayout
	fns    []*cuda.Function // per launch
	bufs   [numPlanBufs]cuda.DevicePtr
	allocs []cuda.DevicePtr
	// tmaps: the tensor maps of tma=1 launches, per weight address (a
	// pass may run on any copy of the weights).
	tmaps map[tmapKey]*cuda.TensorMap
	// windows[i] is launch i's access policy window (l2=4; nil: none);
	// a plan with windows holds the kernels' persisting L2 set-aside.
	windows []*cuda.PolicyWindow
}

type tmapKey struct {
	addr cuda.DevicePtr
	arg  tensorMapArg
}

// NewPlan allocates a plan's buffers for m tokens with configuration c (the
// empty Config: ChooseConfigFor's pick for this GPU), compiling c's module if needed.
func (k *Kernels) NewPlan(s Shape, m int, c Config) (*Plan, error) {
	if err := CheckCUDAShape(s); err != nil {
		return nil, err
	}
	if c.Kernel == "" {
		pr := k.ctx.Props()
		c = ChooseConfigFor(GPU{CC: pr.CCMajor*10 + pr.CCMinor, SMs: pr.SMs}, s, m)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := CheckConfigShape(c, s, m); err != nil {
		return nil, err
	}
	if c.Programmatic() && !k.ctx.ProgrammaticLaunch() {
		return nil, fmt.Errorf("config %v: pl=1 needs programmatic dependent launch (an sm_90 or newer GPU and a CUDA 12+ driver); this is %s", c, k.ctx.Props().Arch())
	}
	var mods [3]*kmodule // base, gemm1's, gemm2's
	mods[0] = k.base
	for i := 1; i <= 2; i++ {
		var err error
		if mods[i], err = k.module(c.Gemm(i)); err != nil {
			return nil, err
		}
	}
	p := &Plan{k: k, Shape: s, M: m, Config: c}
	for i := range 2 {
		gc := c.Gemm(i + 1)
		if gc.Kernel != "tc" && gc.Kernel != "wg" {
			continue
		}
		// The persistent grid: as many blocks as fit on the device at once.
		g1, g2 := gc.kernelNames()
		name := []string{g1, g2}[i]
		f, err := mods[i+1].fn(name, gc.SharedBytes())
		if err != nil {
			return nil, err
		}
		per, err := f.MaxActiveBlocksPerSM(gc.Threads(i+1), gc.SharedBytes())
		if err != nil {
			return nil, err
		}
		if per < 1 {
			return nil, fmt.Errorf("config %v: %s does not fit on a multiprocessor (%d threads, %d bytes of shared memory)", gc, name, gc.Threads(i+1), gc.SharedBytes())
		}
		p.Resident[i] = per * k.ctx.Props().SMs
	}
	p.layout = newPlanLayout(s, m, c, p.Resident)
	want := p.layout.windowBytes()
	if want > 0 && !k.ctx.PersistingL2() {
		return nil, fmt.Errorf("config %v: l2=4 needs a persisting L2 set-aside and access policy windows (CUDA 12+ driver, sm_80+); %s has none", c, k.ctx.Props().Name)
	}
	for _, l := range p.layout.launches {
		f, err := mods[l.gemm].fn(l.kernel, l.smem)
		if err != nil {
			return nil, err
		}
		p.fns = append(p.fns, f)
	}
	for b := bufX; b < numPlanBufs; b++ {
		d, err := k.ctx.Alloc(max(p.layout.bytes[b], 16))
		if err != nil {
			p.Free()
			return nil, fmt.Errorf("allocating buffers for M=%d: %w", m, err)
		}
		p.bufs[b] = d
		p.allocs = append(p.allocs, d)
	}
	// A fused-combine gemm2 counts its blocks from zero; each pass's last
	// block resets the count.
	if err := k.ctx.Memset(p.bufs[bufCombineCount], 0, max(p.layout.bytes[bufCombineCount], 16)); err != nil {
		p.Free()
		return nil, err
	}
	if want > 0 {
		held, err := k.holdPersisting(want)
		if err != nil {
			p.Free()
			return nil, fmt.Errorf("config %v: %w", c, err)
		}
		p.windows = make([]*cuda.PolicyWindow, len(p.layout.launches))
		for i, l := range p.layout.launches {
			if l.windowed {
				// The buffer (the device's largest window at most), as large
				// a share of its lines marked persisting as the set-aside holds.
				bytes := min(p.layout.bytes[l.window], k.ctx.Props().MaxPolicyWindow)
				p.windows[i] = &cuda.PolicyWindow{Base: p.bufs[l.window], Bytes: bytes, HitRatio: float32(min(1, float64(held)/float64(bytes)))}
			}
		}
	}
	return p, nil
}

// Free releases the plan's buffers (and its hold on the persisting L2
// set-aside).
func (p *Plan) Free() error {
	var errs []error
	for _, d := range p.allocs {
		errs = append(errs, p.k.ctx.Free(d))
	}
	p.allocs = nil
	if p.windows != nil {
		errs = append(errs, p.k.releasePersisting())
		p.windows = nil
	}
	return errors.Join(errs...)
}

// holdPersisting sets aside L2 for persisting accesses, as much as the
// device allows up to want bytes (more if a plan holding it wanted more),
// and returns the bytes set aside.
func (k *Kernels) holdPersisting(want int64) (int64, error) {
	k.persist.Lock()
	defer k.persist.Unlock()
	size := min(want, k.ctx.Props().MaxPersistingL2)
	if k.persist.plans == 0 || size > k.persist.bytes {
		if err := k.ctx.SetPersistingL2(size); err != nil {
			return 0, err
		}
		k.persist.bytes = size
	}
	k.persist.plans++
	return k.persist.bytes, nil
}

// releasePersisting gives the set-aside back when the last plan holding it
// is freed, so other work in the process has the whole L2 again.
func (k *Kernels) releasePersisting() error {
	k.persist.Lock()
	defer k.persist.Unlock()
	if k.persist.plans--; k.persist.plans > 0 {
		return nil
	}
	k.persist.bytes = 0
	return k.ctx.SetPersistingL2(0)
}

// SetInputs uploads x[M,H] (rounded to bf16) and the routing.
func (p *Plan) SetInputs(x []float32, r routing.Routing) error {
	s := p.Shape
	if r.M != p.M || r.K != s.K || len(x) != p.M*s.H {
		return fmt.Errorf("inputs for M=%d K=%d H=%d do not fit a plan for M=%d K=%d H=%d", r.M, r.K, len(x)/max(r.M, 1), p.M, s.K, s.H)
	}
	if err := r.Validate(s.E); err != nil {
		return err
	}
	r = r.Computed() // dropped slots compute nothing
	xb := make([]uint16, len(x))
	ToBF16(xb, x)
	if err := p.k.ctx.MemcpyHtoD(p.bufs[bufX], u16bytes(xb)); err != nil {
		return err
	}
	if p.layout.slots == 0 {
		return nil
	}
	if err := p.k.ctx.MemcpyHtoD(p.bufs[bufIDs], unsafe.Slice((*byte)(unsafe.Pointer(&r.IDs[0])), 4*len(r.IDs))); err != nil {
		return err
	}
	return p.k.ctx.MemcpyHtoD(p.bufs[bufWts], unsafe.Slice((*byte)(unsafe.Pointer(&r.Weights[0])), 4*len(r.Weights)))
}

// Poison fills the output and the intermediates with NaN (0xffff), so a
// check sees any element no kernel wrote.
func (p *Plan) Poison(st *cuda.Stream) error {
	for _, b := range []struct {
		d cuda.DevicePtr
		n int64
	}{{p.bufs[bufOut], p.layout.bytes[bufOut]}, {p.bufs[bufAct], p.layout.bytes[bufAct]}, {p.bufs[bufY], p.layout.bytes[bufY]}} {
		if err := st.Memset(b.d, 0xff, b.n); err != nil {
			return err
		}
	}
	return nil
}

// Enqueue queues one forward pass (alignment included) on st with weights w.
func (p *Plan) Enqueue(st *cuda.Stream, w *DeviceWeights) error {
	for i := range p.layout.launches {
		if err := p.enqueueLaunch(st, i, w); err != nil {
			return err
		}
	}
	return nil
}

// enqueueLaunch queues launch i of a pass alone.
func (p *Plan) enqueueLaunch(st *cuda.Stream, i int, w *DeviceWeights) error {
	l := p.layout.launches[i]
	args := make([]any, len(l.args))
	for j, a := range l.args {
		switch b := a.(type) {
		case planBuf:
			switch b {
			case bufW1:
				args[j] = w.W1
			case bufW2:
				args[j] = w.W2
			default:
				args[j] = p.bufs[b]
			}
		case tensorMapArg:
			m, err := p.tensorMap(b, w)
			if err != nil {
				return fmt.Errorf("%s: %w", l.kernel, err)
			}
			args[j] = m.Bytes()
		default:
			args[j] = a
		}
	}
	o := cuda.LaunchOptions{Programmatic: l.programmatic}
	if p.windows != nil {
		o.Window = p.windows[i]
	}
	return p.fns[i].LaunchWith(st, l.grid, l.block, l.smem, o, args...)
}

// tensorMap is the map of a's weight buffer in w, encoded once per copy.
func (p *Plan) tensorMap(a tensorMapArg, w *DeviceWeights) (*cuda.TensorMap, error) {
	addr := w.W1
	if a.buf == bufW2 {
		addr = w.W2
	}
	key := tmapKey{addr, a}
	if m, ok := p.tmaps[key]; ok {
		return m, nil
	}
	m, err := cuda.EncodeTensorMap2D(cuda.TensorMap2D{Addr: addr, Inner: uint64(a.inner), Rows: uint64(a.rows),
		BoxInner: uint32(a.boxInner), BoxRows: uint32(a.boxRows)})
	if err != nil {
		return nil, err
	}
	if p.tmaps == nil {
		p.tmaps = map[tmapKey]*cuda.TensorMap{}
	}
	p.tmaps[key] = m
	return m, nil
}

// Output downloads out[M,H] as float32.
func (p *Plan) Output() ([]float32, error) {
	b := make([]uint16, p.M*p.Shape.H)
	if err := p.k.ctx.MemcpyDtoH(u16bytes(b), p.bufs[bufOut]); err != nil {
		return nil, err
	}
	out := make([]float32, len(b))
	FromBF16(out, b)
	return out, nil
}

// Intermediate downloads act[slots, I] (after gemm1) as float32: for
// diagnosing which stage went wrong.
func (p *Plan) Intermediate() ([]float32, error) {
	b := make([]uint16, p.layout.slots*p.Shape.I)
	if err := p.k.ctx.MemcpyDtoH(u16bytes(b), p.bufs[bufAct]); err != nil {
		return nil, err
	}
	out := make([]float32, len(b))
	FromBF16(out, b)
	return out, nil
}

// AlignmentOut downloads the device's alignment (after Enqueue ran).
func (p *Plan) AlignmentOut() (sorted, blockExpert []int32, total int, err error) {
	tb := make([]int32, 1)
	if err = p.k.ctx.MemcpyDtoH(unsafe.Slice((*byte)(unsafe.Pointer(&tb[0])), 4), p.bufs[bufTotal]); err != nil {
		return
	}
	total = int(tb[0])
	if total < 0 || total > p.layout.maxRows {
		return nil, nil, total, fmt.Errorf("device alignment total %d outside [0, %d]", total, p.layout.maxRows)
	}
	sorted = make([]int32, max(total, 1))
	blockExpert = make([]int32, max(p.layout.maxRows/p.Config.Gemm(1).Block(), 1))
	if err = p.k.ctx.MemcpyDtoH(unsafe.Slice((*byte)(unsafe.Pointer(&sorted[0])), 4*len(sorted)), p.bufs[bufSorted]); err != nil {
		return
	}
	err = p.k.ctx.MemcpyDtoH(unsafe.Slice((*byte)(unsafe.Pointer(&blockExpert[0])), 4*len(blockExpert)), p.bufs[bufBlockExpert])
	return sorted[:total], blockExpert, total, err
}

// TimeGraph times the plan the way the suite reports it: one eager pass to
// warm up (module load, caches, clocks) and to estimate the time of a call;
// then a CUDA graph of enough back-to-back passes to run ≥ ~3 ms (at least
// 8, at most 256), each pass using the next weight copy in turn so that
// rotated copies keep the touched experts from being served out of L2; one
// replay to warm the graph up; then `samples` replays, each between two
// events. A sample is a replay's device time divided by its passes, in µs.
func (p *Plan) TimeGraph(st *cuda.Stream, copies []*DeviceWeights, samples int) (perCall []float64, calls int, err error) {
	return p.timeCalls(st, copies, samples, p.Enqueue)
}

// StageTime is one kernel of a pass timed alone.
type StageTime struct {
	Stage  string    // align, gemm1, gemm2 or combine
	Kernel string    // the kernels' names, joined by "+"
	US     []float64 // µs per call, one per sample
}

// StageName is the pass stage a kernel runs: align, gemm1, gemm2, combine.
func StageName(kernel string) string {
	for _, s := range []string{"align", "gemm1", "gemm2", "combine"} {
		if strings.HasPrefix(kernel, "moe_"+s) {
			return s
		}
	}
	return kernel
}

// TimeStages times each stage of the pass on its own, the way TimeGraph
// times the pass (a graph of back-to-back calls, weight copies rotated):
// where a pass's time goes. Run it after a full pass, so that every stage's
// inputs (the alignment, the intermediates) are in place. A stage's kernels
// are replayed together, never one alone: the GEMMs and the combine only
// rewrite their own outputs, but moe_align_scan turns the block counts that
// moe_align_count wrote into row offsets in place, so replayed without the
// count it would read offsets as counts.
func (p *Plan) TimeStages(st *cuda.Stream, copies []*DeviceWeights, samples int) ([]StageTime, error) {
	var out []StageTime
	launches := p.layout.launches
	for i := 0; i < len(launches); {
		// Consecutive launches of one stage (the multi-block alignment's
		// three kernels) are timed together.
		j, stage := i+1, StageName(launches[i].kernel)
		for j < len(launches) && StageName(launches[j].kernel) == stage {
			j++
		}
		var names []string
		for _, l := range launches[i:j] {
			names = append(names, l.kernel)
		}
		first, last := i, j
		us, _, err := p.timeCalls(st, copies, samples, func(st *cuda.Stream, w *DeviceWeights) error {
			for k := first; k < last; k++ {
				if err := p.enqueueLaunch(st, k, w); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("timing %s: %w", stage, err)
		}
		out = append(out, StageTime{Stage: stage, Kernel: strings.Join(names, "+"), US: us})
		i = j
	}
	return out, nil
}

// timeCalls is TimeGraph for any call: one eager call per weight copy to
// warm up and estimate, then graphs of enough calls to run ≥ ~3 ms.
func (p *Plan) timeCalls(st *cuda.Stream, copies []*DeviceWeights, samples int, call func(*cuda.Stream, *DeviceWeights) error) (perCall []float64, calls int, err error) {
	if len(copies) == 0 {
		return nil, 0, errors.New("timing: no weights")
	}
	ctx := p.k.ctx
	start, err := ctx.NewEvent(true)
	if err != nil {
		return nil, 0, err
	}
	defer start.Destroy()
	stop, err := ctx.NewEvent(true)
	if err != nil {
		return nil, 0, err
	}
	defer stop.Destroy()
	elapsed := func(run func() error) (float64, error) {
		if err := st.Record(start); err != nil {
			return 0, err
		}
		if err := run(); err != nil {
			return 0, err
		}
		if err := st.Record(stop); err != nil {
			return 0, err
		}
		if err := stop.Synchronize(); err != nil {
			return 0, err
		}
		d, err := stop.Elapsed(start)
		return float64(d.Nanoseconds()) / 1e3, err
	}
	warm := func() error {
		for i := range copies {
			if err := call(st, copies[i]); err != nil {
				return err
			}
		}
		return nil
	}
	est, err := elapsed(warm)
	if err != nil {
		return nil, 0, err
	}
	est /= float64(len(copies))
	calls = int(3000 / max(est, 1))
	calls = min(max(calls, 8), 256)
	graph, err := st.Capture(func() error {
		for i := 0; i < calls; i++ {
			if err := call(st, copies[i%len(copies)]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	defer graph.Destroy()
	replay := func() error { return graph.Launch(st) }
	if p.WarmUp != nil {
		err = p.WarmUp(func() (float64, error) {
			us, err := elapsed(replay)
			return us * 1e-6, err
		})
	} else {
		_, err = elapsed(replay)
	}
	if err != nil {
		return nil, 0, err
	}
	for i := 0; i < samples; i++ {
		us, err := elapsed(replay)
		if err != nil {
			return nil, 0, err
		}
		perCall = append(perCall, us/float64(calls))
	}
	return perCall, calls, nil
}

// RotationCopies is how many weight copies a timing loop rotates through so
// that the experts one call touches are not still in an L2 of l2Bytes when
// the same copy comes round again: enough copies to hold twice the L2
// between two uses, capped at maxCopies (and 1 when the touched bytes alone
// exceed twice the L2).
func RotationCopies(touchedBytes, l2Bytes int64, maxCopies int) int {
	if touchedBytes <= 0 || l2Bytes <= 0 {
		return 1
	}
	n := int((2*l2Bytes)/touchedBytes) + 1
	return min(max(n, 1), maxCopies)
}
