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
	numPlanBufs
)

// launchSpec is one kernel launch of a forward pass; args are planBuf
// (the buffer's device address) or int32 values.
type launchSpec struct {
	kernel      string
	grid, block cuda.Dim3
	smem        int
	args        []any
}

// planLayout is a forward pass's geometry, from the shape, batch and
// configuration alone: buffer sizes and the four launches. The CUDA plan
// runs it on a device; the CPU emulator test runs the same list.
type planLayout struct {
	slots, maxRows int
	bytes          [numPlanBufs]int64
	launches       []launchSpec
}

// newPlanLayout lays out a pass of m tokens. resident[i] is how many blocks
// of the tc gemm(i+1) kernel fit on the device at once: their persistent
// grid (ignored by the other families, whose grids cover every possible
// tile and whose blocks past the device's padded total return at once).
func newPlanLayout(s Shape, m int, c Config, resident [2]int) planLayout {
	l := planLayout{slots: m * s.K}
	l.maxRows = MaxAlignedRows(l.slots, s.E, c.Block())
	mh := int64(m) * int64(s.H) * 2
	b := &l.bytes
	b[bufW1] = int64(s.E) * 2 * int64(s.I) * int64(s.H) * 2
	b[bufW2] = int64(s.E) * int64(s.H) * int64(s.I) * 2
	b[bufX], b[bufOut] = mh, mh
	b[bufIDs], b[bufWts] = int64(l.slots)*4, int64(l.slots)*4
	b[bufSorted] = int64(l.maxRows) * 4
	b[bufBlockExpert] = int64(l.maxRows/c.Block()) * 4
	b[bufTotal] = 4
	b[bufAct] = int64(l.slots) * int64(s.I) * 2
	b[bufY] = int64(l.slots) * int64(s.H) * 2
	groups := alignBlocks(l.slots)
	if groups > 1 {
		b[bufAlignCounts] = int64(groups) * int64(s.E) * 4
	}

	tiles := l.maxRows / c.Block()
	var grid1, grid2 cuda.Dim3
	switch c.Kernel {
	case "skinny":
		grid1 = cuda.Dim3{X: (s.I + 15) / 16, Y: tiles}
		grid2 = cuda.Dim3{X: (s.H + 15) / 16, Y: tiles}
	case "tc", "wg":
		// One block per resident slot, at most one per possible tile.
		n1 := tiles * ((s.I + c.BN/2 - 1) / (c.BN / 2))
		n2 := tiles * ((s.H + c.BN - 1) / c.BN)
		grid1 = cuda.Dim3{X: max(1, min(n1, resident[0]))}
		grid2 = cuda.Dim3{X: max(1, min(n2, resident[1]))}
	default:
		grid1 = cuda.Dim3{X: (s.I + c.BN/2 - 1) / (c.BN / 2), Y: tiles}
		grid2 = cuda.Dim3{X: (s.H + c.BN - 1) / c.BN, Y: tiles}
	}
	g1, g2 := c.kernelNames()
	pad, topk := int32(l.slots), int32(s.K)
	align := []launchSpec{{kernel: "moe_align", grid: cuda.Dim3{X: 1}, block: cuda.Dim3{X: 1024},
		args: []any{bufIDs, int32(l.slots), int32(s.E), int32(c.Block()), bufSorted, bufBlockExpert, bufTotal, int32(l.maxRows)}}}
	if groups > 1 {
		align = []launchSpec{
			{kernel: "moe_align_count", grid: cuda.Dim3{X: groups}, block: cuda.Dim3{X: 1024},
				args: []any{bufIDs, int32(l.slots), int32(s.E), bufAlignCounts}},
			{kernel: "moe_align_scan", grid: cuda.Dim3{X: 1}, block: cuda.Dim3{X: 1024},
				args: []any{int32(groups), int32(l.slots), int32(s.E), int32(c.Block()), bufAlignCounts, bufSorted, bufBlockExpert, bufTotal, int32(l.maxRows)}},
			{kernel: "moe_align_scatter", grid: cuda.Dim3{X: groups}, block: cuda.Dim3{X: 1024},
				args: []any{bufIDs, int32(l.slots), int32(s.E), bufAlignCounts, bufSorted}},
		}
	}
	l.launches = append(align,
		launchSpec{kernel: g1, grid: grid1, block: cuda.Dim3{X: c.Threads(1)}, smem: c.SharedBytes(),
			args: []any{bufW1, bufX, bufAct, bufWts, bufSorted, bufBlockExpert, bufTotal, int32(s.I), int32(s.H), topk, pad}},
		launchSpec{kernel: g2, grid: grid2, block: cuda.Dim3{X: c.Threads(2)}, smem: c.SharedBytes(),
			args: []any{bufW2, bufAct, bufY, bufWts, bufSorted, bufBlockExpert, bufTotal, int32(s.H), int32(s.I), topk, pad}},
		launchSpec{kernel: "moe_combine", grid: cuda.Dim3{X: (m*s.H/8 + 255) / 256}, block: cuda.Dim3{X: 256},
			args: []any{bufY, bufIDs, bufOut, int32(m), int32(s.H), topk}},
	)
	return l
}

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
	names := [...]string{"w1", "w2", "x", "out", "ids", "wts", "sorted", "block_expert", "total", "act", "y", "align_counts"}
	if b >= 0 && int(b) < len(names) {
		return names[b]
	}
	return fmt.Sprintf("buf%d", int(b))
}
