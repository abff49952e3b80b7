package moe

// Alignment groups a routing's slots by expert, each expert's group padded
// to a multiple of Block rows, so a grouped GEMM can give every tile of Block
// rows a single expert. It is the CPU mirror of the CUDA kernel moe_align's
// output: the same buffers with the same meaning, except that the GPU orders
// the slots inside one expert's group in whatever order its atomics ran
// (which changes nothing: each row is computed on its own), while this
// version keeps them in increasing slot order.
type Alignment struct {
	Block int
	// SortedSlots lists slot indices (token·K + j) expert by expert; padding
	// entries hold Pad (= M·K, one past the last slot).
	SortedSlots []int32
	// BlockExpert is the expert of each Block-row tile of SortedSlots.
	BlockExpert []int32
	// Offsets[e] is where expert e's group starts in SortedSlots (a multiple
	// of Block); Offsets[E] is the padded total.
	Offsets []int32
	// Counts[e] is how many slots go to expert e.
	Counts []int32
	Pad    int32
}

// Total is the padded number of rows.
func (a Alignment) Total() int { return int(a.Offsets[len(a.Offsets)-1]) }

// MaxAlignedRows bounds the padded total for any routing of `slots` slots
// over e experts with the given block: each touched expert adds under one
// block of padding, and at most min(e, slots) experts are touched. GPU
// buffers and grids are sized by it, because the real total is known only on
// the device.
func MaxAlignedRows(slots, e, block int) int {
	if slots == 0 {
		return 0
	}
	touched := min(e, slots)
	return ((slots + touched*(block-1)) + block - 1) / block * block
}

// Align groups ids (M·K slots, routing.Empty ones skipped) over e experts.
func Align(ids []int32, e, block int) Alignment {
	a := Alignment{Block: block, Offsets: make([]int32, e+1), Counts: make([]int32, e), Pad: int32(len(ids))}
	for _, id := range ids {
		if id >= 0 {
			a.Counts[id]++
		}
	}
	for ex := 0; ex < e; ex++ {
		padded := (a.Counts[ex] + int32(block) - 1) / int32(block) * int32(block)
		a.Offsets[ex+1] = a.Offsets[ex] + padded
	}
	total := a.Offsets[e]
	a.SortedSlots = make([]int32, total)
	for i := range a.SortedSlots {
		a.SortedSlots[i] = a.Pad
	}
	cursor := make([]int32, e)
	copy(cursor, a.Offsets[:e])
	for s, id := range ids {
		if id >= 0 {
			a.SortedSlots[cursor[id]] = int32(s)
			cursor[id]++
		}
	}
	a.BlockExpert = make([]int32, total/int32(block))
	for ex := 0; ex < e; ex++ {
		for b := a.Offsets[ex] / int32(block); b < a.Offsets[ex+1]/int32(block); b++ {
			a.BlockExpert[b] = int32(ex)
		}
	}
	return a
}
