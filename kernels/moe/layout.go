package moe

import (
	"fmt"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
)

// planBuf names one of a plan's buffers in its launch list.
type planBuf int

const (
	bufW1 planBuf = iota
	bufW2
	bufX
	bufOut
	bufIDs
	bufWts
	bufSorted
	bufBlockExpert
	bufTotal
	bufAct
	bufY
	bufAlignCounts
	// gemm2's own alignment, when a split configuration's two GEMMs tile
	// tokens in blocks of different sizes.
	bufSorted2
	bufBlockExpert2
	bufTotal2
	// Per output-column tile of a fused-combine gemm2: its blocks done so
	// far (zero between passes).
	bufCombineCount
	numPlanBufs
)

// launchSpec is one kernel launch of a forward pass; args are planBuf
// (the buffer's device address), tensorMapArg or int32 values.
type launchSpec struct {
	kernel      string
	gemm        int // 1 or 2: the GEMM whose configuration's module holds the kernel; 0: the base module
	grid, block cuda.Dim3
	smem        int
	args        []any
	// programmatic: launched with programmatic dependent launch (Config.PL).
	programmatic bool
	// cluster: blocks per cluster (2 for mc=1 and mc=2: the kernel declares it with
	// __cluster_dims__, so the launch needs no attribute); 0 for none.
	cluster int
	// windowed: the launch keeps buffer window in L2 through an access
	// policy window (l2=4: the GEMM's gathered rows, x or act).
	windowed bool
	window   planBuf
}

// tensorMapArg is a kernel argument passed by value: the tensor map of a
// weight buffer (rows × inner bf16, row-major) read in boxes of boxRows ×
// boxInner with the 128-byte swizzle (the wg kernels' tma=1).
type tensorMapArg struct {
	buf               planBuf
	inner, rows       int64
	boxInner, boxRows int
}

// planLayout is a forward pass's geometry, from the shape, batch and
// configuration alone: buffer sizes and the four launches. The CUDA plan
// runs it on a device; the CPU emulator test runs the same list.
type planLayout struct {
	slots, maxRows int
	maxRows2       int // gemm2's, when it has its own alignment; else maxRows
	bytes          [numPlanBufs]int64
	launches       []launchSpec
}

// newPlanLayout lays out a pass of m tokens. resident[i] is how many blocks
// of the tc gemm(i+1) kernel fit on the device at once: their persistent
// grid (ignored by the other families, whose grids cover every possible
// tile and whose blocks past the device's padded total return at once).
func newPlanLayout(s Shape, m int, c Config, resident [2]int) planLayout {
	c1, c2 := c.Gemm(1), c.Gemm(2)
	l := planLayout{slots: m * s.K}
	l.maxRows = MaxAlignedRows(l.slots, s.E, c1.Block())
	l.maxRows2 = l.maxRows
	own2 := c2.Block() != c1.Block() // gemm2 needs an alignment of its own
	if own2 {
		l.maxRows2 = MaxAlignedRows(l.slots, s.E, c2.Block())
	}
	mh := int64(m) * int64(s.H) * 2
	b := &l.bytes
	b[bufW1] = int64(s.E) * 2 * int64(s.I) * int64(s.H) * 2
	b[bufW2] = int64(s.E) * int64(s.H) * int64(s.I) * 2
	b[bufX], b[bufOut] = mh, mh
	b[bufIDs], b[bufWts] = int64(l.slots)*4, int64(l.slots)*4
	b[bufSorted] = int64(l.maxRows) * 4
	b[bufBlockExpert] = int64(l.maxRows/c1.Block()) * 4
	b[bufTotal] = 4
	if own2 {
		b[bufSorted2] = int64(l.maxRows2) * 4
		b[bufBlockExpert2] = int64(l.maxRows2/c2.Block()) * 4
		b[bufTotal2] = 4
	}
	b[bufAct] = int64(l.slots) * int64(s.I) * 2
	b[bufY] = int64(l.slots) * int64(s.H) * 2
	groups := alignBlocks(l.slots)
	if groups > 1 {
		b[bufAlignCounts] = int64(groups) * int64(s.E) * 4
	}

	grid1 := gemmGrid(c1, s.I, true, l.maxRows/c1.Block(), resident[0])
	grid2 := gemmGrid(c2, s.H, false, l.maxRows2/c2.Block(), resident[1])
	g1, _ := c1.kernelNames()
	_, g2 := c2.kernelNames()
	pad, topk := int32(l.slots), int32(s.K)
	sorted2, blockExpert2, total2 := bufSorted, bufBlockExpert, bufTotal
	if !c1.selfAligns() {
		l.launches = alignLaunches(s, l.slots, groups, c1.Block(), l.maxRows, bufSorted, bufBlockExpert, bufTotal)
	}
	if own2 {
		sorted2, blockExpert2, total2 = bufSorted2, bufBlockExpert2, bufTotal2
		l.launches = append(l.launches, alignLaunches(s, l.slots, groups, c2.Block(), l.maxRows2, sorted2, blockExpert2, total2)...)
	}
	gemm2 := launchSpec{kernel: g2, gemm: 2, grid: grid2, block: cuda.Dim3{X: c2.Threads(2)}, smem: c2.SharedBytes(), programmatic: c2.PL != 0, cluster: clusterOf(c2),
		args: []any{bufW2, bufAct, bufY, bufWts, sorted2, blockExpert2, total2, int32(s.H), int32(s.I), topk, pad}}
	if c2.fusedCombine() {
		gemm2.args = append(gemm2.args, bufIDs, bufOut, bufCombineCount, int32(m))
		b[bufCombineCount] = int64(grid2.X) * 4
	}
	if c2.Kernel == "wg" && c2.TMA != 0 {
		// mc=1: the tile as two boxes of BN/2 rows, one per block of a cluster.
		box := c2.BN
		if c2.MC != 0 {
			box = c2.BN / 2
		}
		gemm2.args = append(gemm2.args, tensorMapArg{buf: bufW2, inner: int64(s.I), rows: int64(s.E) * int64(s.H), boxInner: 64, boxRows: box})
	}
	gemm1 := launchSpec{kernel: g1, gemm: 1, grid: grid1, block: cuda.Dim3{X: c1.Threads(1)}, smem: c1.SharedBytes(), programmatic: c1.PL != 0, cluster: clusterOf(c1),
		args: []any{bufW1, bufX, bufAct, bufWts, bufSorted, bufBlockExpert, bufTotal, int32(s.I), int32(s.H), topk, pad}}
	if c1.selfAligns() {
		gemm1.args = append(gemm1.args, bufIDs)
	}
	if c1.Kernel == "wg" && c1.TMA != 0 {
		// gemm1 loads its gate and up halves as two boxes of BN/2 rows.
		gemm1.args = append(gemm1.args, tensorMapArg{buf: bufW1, inner: int64(s.H), rows: int64(s.E) * 2 * int64(s.I), boxInner: 64, boxRows: c1.BN / 2})
	}
	// l2=4: each GEMM's gathered rows in a persisting L2 window (each token
	// row is read again by its topk experts' tiles, far apart in time).
	if c1.Kernel == "wg" && c1.L2 == 4 {
		gemm1.windowed, gemm1.window = true, bufX
	}
	if c2.Kernel == "wg" && c2.L2 == 4 {
		gemm2.windowed, gemm2.window = true, bufAct
	}
	l.launches = append(l.launches, gemm1, gemm2)
	if !c2.fusedCombine() {
		l.launches = append(l.launches, launchSpec{kernel: "moe_combine", grid: cuda.Dim3{X: (m*s.H/8 + 255) / 256}, block: cuda.Dim3{X: 256},
			args: []any{bufY, bufIDs, bufOut, int32(m), int32(s.H), topk}, programmatic: c2.PL != 0})
	}
	return l
}

// selfAligns says whether gemm1 with this configuration also aligns.
func (c Config) selfAligns() bool { return (c.Kernel == "skinny" || c.Kernel == "tc") && c.SA != 0 }

// fusedCombine says whether gemm2 with this configuration also combines.
func (c Config) fusedCombine() bool { return c.Kernel == "skinny" && c.FC != 0 }

// gemmGrid is one GEMM's grid over n output columns (gemm1: n = I, its
// tiles covering gate and up halves) and `tiles` token blocks; resident is
// how many blocks of a persistent kernel fit on the device at once.
func gemmGrid(c Config, n int, gemm1 bool, tiles, resident int) cuda.Dim3 {
	cols := c.BN
	if gemm1 {
		cols = c.BN / 2
	}
	switch c.Kernel {
	case "skinny":
		if c.GV != 0 {
			// gv: GV_COLS1 features a block in gemm1, GV_COLS2 in gemm2 (moe.cu).
			cols := gvCols2
			if gemm1 {
				cols = gvCols1
			}
			return cuda.Dim3{X: (n + cols - 1) / cols, Y: tiles}
		}
		return cuda.Dim3{X: (n + 15) / 16, Y: tiles}
	case "tc", "wg":
		// One block per resident slot, at most one per possible tile; mc=1
		// blocks come in clusters of two.
		x := max(1, min(tiles*((n+cols-1)/cols), resident))
		if c.MC != 0 {
			x = (x + 1) / 2 * 2
		}
		return cuda.Dim3{X: x}
	}
	return cuda.Dim3{X: (n + cols - 1) / cols, Y: tiles}
}

// alignLaunches sort the slots by expert into blocks of `block` rows:
// moe_align in one block, or past two chunks count, scan and scatter.
func alignLaunches(s Shape, slots, groups, block, maxRows int, sorted, blockExpert, total planBuf) []launchSpec {
	if groups <= 1 {
		return []launchSpec{{kernel: "moe_align", grid: cuda.Dim3{X: 1}, block: cuda.Dim3{X: 1024},
			args: []any{bufIDs, int32(slots), int32(s.E), int32(block), sorted, blockExpert, total, int32(maxRows)}}}
	}
	return []launchSpec{
		{kernel: "moe_align_count", grid: cuda.Dim3{X: groups}, block: cuda.Dim3{X: 1024},
			args: []any{bufIDs, int32(slots), int32(s.E), bufAlignCounts}},
		{kernel: "moe_align_scan", grid: cuda.Dim3{X: 1}, block: cuda.Dim3{X: 1024},
			args: []any{int32(groups), int32(slots), int32(s.E), int32(block), bufAlignCounts, sorted, blockExpert, total, int32(maxRows)}},
		{kernel: "moe_align_scatter", grid: cuda.Dim3{X: groups}, block: cuda.Dim3{X: 1024},
			args: []any{bufIDs, int32(slots), int32(s.E), bufAlignCounts, sorted}},
	}
}

// gvWarps, gvCols1 and gvCols2 are moe.cu's GV_WARPS, GV_COLS1 and
// GV_COLS2: a gv block's warps, and the features it computes in gemm1 and
// gemm2 (TestGVConfig holds them to moe.cu's).
const (
	gvWarps = 8
	gvCols1 = gvWarps / 2
	gvCols2 = gvWarps * 4
)

// alignChunk is ALIGN_CHUNK in moe.cu: slots per block of the multi-block
// alignment.
const alignChunk = 2048

// alignBlocks is how many blocks align `slots` slots: 1 (the single-block
// moe_align) up to two chunks' worth, where one block is as fast as three
// launches; beyond, one block per chunk.
func alignBlocks(slots int) int {
	g := (slots + alignChunk - 1) / alignChunk
	if g <= 2 {
		return 1
	}
	return g
}

// PlanBytes is the device memory a plan for m tokens allocates (inputs,
// routing, alignment, intermediates, output), not counting the weights.
func PlanBytes(s Shape, m int, c Config) int64 {
	l := newPlanLayout(s, m, c, [2]int{1, 1})
	var n int64
	for b := bufX; b < numPlanBufs; b++ {
		n += l.bytes[b]
	}
	return n
}

func (b planBuf) String() string {
	names := [...]string{"w1", "w2", "x", "out", "ids", "wts", "sorted", "block_expert", "total", "act", "y", "align_counts",
		"sorted2", "block_expert2", "total2", "combine_count"}
	if b >= 0 && int(b) < len(names) {
		return names[b]
	}
	return fmt.Sprintf("buf%d", int(b))
}

// windowBytes is the largest buffer a launch keeps in an L2 window (l2=4);
// 0 when none does.
func (l planLayout) windowBytes() int64 {
	var most int64
	for _, s := range l.launches {
		if s.windowed {
			most = max(most, l.bytes[s.window])
		}
	}
	return most
}

// clusterOf is the blocks per cluster of a GEMM's kernel: 2 with mc=1 or
// mc=2, else 0 (none).
func clusterOf(c Config) int {
	if c.MC != 0 {
		return 2
	}
	return 0
}
