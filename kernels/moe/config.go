package moe

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// Config picks the GEMM kernels for one batch: "skinny" (decode: weights
// stream through registers, tokens in groups of 8·NT), "tiled" (the v1–v3
// prefill GEMM: BM×BN×BK tiles through a STAGES-deep cp.async pipeline,
// WM×WN warps) or "tc" (the v4 prefill GEMM: swizzled shared memory,
// register double buffering, shared-memory epilogue, a persistent grid
// walking GM m-tiles per n-tile; moe.cu has the details).
type Config struct {
	Kernel string // "skinny", "tiled", "tc" or "wg" (Hopper)
	NT     int    // skinny: 1, 2 or 4
	// FC (skinny): 1 fuses the combine into gemm2 (its last block per
	// output-column tile sums the tokens' rows), one launch less.
	FC int
	// SA (skinny, tc): 1 fuses the alignment into gemm1 (each block sorts
	// the slots itself; at most 64), one launch less.
	SA int
	// W1, W2: skinny warps per block (split-K) of gemm1 and gemm2: 4, or 16
	// with NT 1 (0 means 4).
	W1, W2 int
	// GV (skinny, nt=1): 1 computes the GEMMs as dot products, a warp per
	// weight row read whole in 512-byte loads and fp32 FMAs over the
	// group's real tokens only, instead of MMA fragments 64 bytes of 8 rows
	// wide (moe.cu's gv section); 8 warps a block, so no W1/W2.
	GV                         int
	Tile                       string // tiled: a tiledTable name or "custom"
	BM, BN, BK, WM, WN, Stages int
	// GM (tc): m-tiles per group of the tile order; MinBlocks (tc): blocks
	// per multiprocessor the compiler must allow (registers ≤ 64K/threads/MinBlocks).
	GM, MinBlocks int
	// OV (tc): 1 issues the next tile's first loads before this tile's
	// epilogue, which then stores from registers (no shared C tile); 2 runs
	// one ring of stages across the block's tiles, the loads ST-1 stages
	// ahead of the MMAs through tile boundaries (also storing from registers).
	OV int
	// NC (wg): consumer warpgroups per block, each computing 64 token rows
	// (BM = 64·NC); BN and Stages and GM as for tc, BK is 64. PP (wg): 1
	// gives each consumer whole 64-row tiles in turn (BM = 64), so one
	// warpgroup's epilogue overlaps the other's MMAs.
	NC, PP int
	// TMA (wg): 1 loads each stage's weight tile with the tensor memory
	// accelerator (one cp.async.bulk.tensor per 128-byte-wide box, issued by
	// one producer thread, completing on the stage's mbarrier) instead of
	// 16-byte cp.async from every producer thread; the gathered token rows
	// stay on cp.async. Needs K a multiple of 8 (16-byte row pitch).
	TMA int
	// MC (wg, with tma=1 and no pp): 1 runs blocks in clusters of two that
	// take two m-tiles of the same n-tile; where both are the same expert's,
	// each block loads half of the weight tile and TMA multicasts it into
	// both (half the weight traffic per block). 2 runs clusters of two over
	// two n-tiles of the same m-tile: each block gathers half of the token
	// rows and copies them into its peer's stage (a shared-to-cluster bulk
	// copy), so a token row leaves L2 once for both. Consumers hand a stage
	// back to both blocks' producers.
	MC int
	// L2 (wg): 4 launches each GEMM with a persisting L2 access policy
	// window over the rows it gathers (gemm1's x, gemm2's act): a token row
	// is read again by each of its topk experts' tiles, far apart in time,
	// while the weight stream passes through L2 in between. No kernel code
	// changes (the window is a launch attribute), so l2=4 shares its
	// module with l2=0. Measured on an H100 (v33): −3 to −4% per GEMM at
	// M=1024, 20–90% slower at M=4096 (the rows no longer fit the window);
	// the tuner tries it on each batch's fastest configuration
	// (TrafficVariants, which also says how the replays favour it). Bits 1, 2
	// and 8 (evict-first weights, cache-hinted gathers, an evict-last
	// prefetch) were tried and are refused: slower, an illegal instruction
	// under ptxas 13 before 13.4.59, and no gain.
	L2 int
	// PL (skinny, tc, wg): 1 launches this GEMM's kernel with programmatic
	// dependent launch (sm_90+; for gemm2 the combine after it too): its
	// blocks are scheduled while the kernel before it finishes. It saves
	// ~0.4 µs of launch gap per kernel and can cost more where the early
	// blocks share multiprocessors with the running kernel, so the tuner
	// decides (kernels/moe/NOTES.md, v17).
	PL int
	// G2, when set, is gemm2's own configuration (a split configuration:
	// the two GEMMs have different shapes, N = 2I by K = H against N = H by
	// K = I, and their best tiles differ, as the tuned Triton design's do).
	// The fields above are then gemm1's. Treated as immutable.
	G2 *Config
}

// Split is the configuration that runs gemm1 with g1's kernels and gemm2
// with g2's; g1 itself when both are the same.
//
// Each half drops the settings only the other GEMM reads (skinny's FC and W2
// mean nothing to gemm1, SA and W1 nothing to gemm2, tc's SA nothing to
// gemm2), so that one kernel has
// one name: the tuner would otherwise time the same kernel twice and could
// report a split that fuses nothing as "fc=1". Halves that then differ only
// in those settings are one configuration carrying both.
func Split(g1, g2 Config) Config {
	g1, g2 = g1.Gemm(1), g2.Gemm(2)
	if g1.String() == g2.String() {
		return g1
	}
	if g1.Kernel == "skinny" {
		g1.FC, g1.W2 = 0, 0
	}
	if g2.Kernel == "skinny" {
		g2.SA, g2.W1 = 0, 0
	}
	if g2.Kernel == "tc" {
		g2.SA = 0
		if one := g2; g1.Kernel == "tc" {
			one.SA = g1.SA
			if one.String() == g1.String() {
				return g1 // one tc configuration, its gemm1 self-aligning
			}
		}
	}
	if g1.Kernel == "skinny" && g2.Kernel == "skinny" {
		one, two := g1, g2
		one.FC, one.W2 = g2.FC, g2.W2
		two.SA, two.W1 = g1.SA, g1.W1
		if one.String() == two.String() {
			return one
		}
	}
	g1.G2 = &g2
	return g1
}

// Gemm is the configuration of gemm1 (which = 1) or gemm2 (which = 2),
// never itself split.
func (c Config) Gemm(which int) Config {
	if which == 2 && c.G2 != nil {
		return *c.G2
	}
	c.G2 = nil
	return c
}

// IsSplit says whether the two GEMMs run different configurations.
func (c Config) IsSplit() bool { return c.G2 != nil }

// wgTable is the Hopper (sm_90a) prefill GEMM's named configurations
// (warpgroup MMAs fed by a producer warpgroup; moe.cu has the details).
// Names read BMxBN and the stages.
var wgTable = map[string]Config{
	"128x256s4": wg(2, 256, 4, 8),
	"128x256s3": wg(2, 256, 3, 8),
	"128x128s4": wg(2, 128, 4, 8),
	"128x128s6": wg(2, 128, 6, 8),
	"64x256s4":  wg(1, 256, 4, 8),
	"64x128s4":  wg(1, 128, 4, 8),
	"64x128s6":  wg(1, 128, 6, 8),
	// Ping-pong: two consumers on alternate 64-row tiles.
	"64x256s4pp": pp(wg(2, 256, 4, 8)),
	"64x256s5pp": pp(wg(2, 256, 5, 8)),
	"64x128s6pp": pp(wg(2, 128, 6, 8)),
	// tma=1 twins of the tuned files' winners: the weight tiles through
	// tensor maps (kernels/moe/NOTES.md v19).
	"128x256s4tma":  tma(wg(2, 256, 4, 8)),
	"128x256s3tma":  tma(wg(2, 256, 3, 8)),
	"64x256s4tma":   tma(wg(1, 256, 4, 8)),
	"64x256s4pptma": tma(pp(wg(2, 256, 4, 8))),
	"64x256s5pptma": tma(pp(wg(2, 256, 5, 8))),
	// Clusters of two sharing each weight tile by multicast (NOTES v20).
	"128x256s4mc": mc(tma(wg(2, 256, 4, 8))),
	"128x256s3mc": mc(tma(wg(2, 256, 3, 8))),
	"64x256s4mc":  mc(tma(wg(1, 256, 4, 8))),
}

func pp(c Config) Config {
	c.PP, c.BM = 1, 64
	return c
}

func tma(c Config) Config { c.TMA = 1; return c }

func mc(c Config) Config { c.MC = 1; return c }

func mn(c Config) Config { c.MC = 2; return c }

func withL2(c Config, bits int) Config { c.L2 = bits; return c }

func wg(nc, bn, st, gm int) Config {
	return Config{Kernel: "wg", NC: nc, BM: 64 * nc, BN: bn, BK: 64, Stages: st, GM: gm}
}

// WGConfigs is every named wg configuration, in name order.
func WGConfigs() []Config {
	var out []Config
	for _, n := range tableNames(wgTable) {
		out = append(out, wgTable[n])
	}
	return out
}

// tiledTable mirrors the TILED_KERNEL instantiations in moe.cu.
var tiledTable = map[string]Config{
	"m16":  {Kernel: "tiled", Tile: "m16", BM: 16, BN: 128, BK: 64, WM: 1, WN: 4, Stages: 4},
	"m32":  {Kernel: "tiled", Tile: "m32", BM: 32, BN: 128, BK: 64, WM: 1, WN: 4, Stages: 4},
	"m64":  {Kernel: "tiled", Tile: "m64", BM: 64, BN: 128, BK: 32, WM: 2, WN: 2, Stages: 4},
	"m128": {Kernel: "tiled", Tile: "m128", BM: 128, BN: 128, BK: 32, WM: 2, WN: 4, Stages: 4},
	// 64×64 warp tiles.
	"w128x128": {Kernel: "tiled", Tile: "w128x128", BM: 128, BN: 128, BK: 32, WM: 2, WN: 2, Stages: 4},
	"w128x256": {Kernel: "tiled", Tile: "w128x256", BM: 128, BN: 256, BK: 32, WM: 2, WN: 4, Stages: 3},
	"w64x256":  {Kernel: "tiled", Tile: "w64x256", BM: 64, BN: 256, BK: 32, WM: 1, WN: 4, Stages: 4},
}

// tcTable is the v4 prefill GEMM's named configurations: the candidates the
// tuner tries (each is its own small module, compiled when first used).
// Names read BMxBN, then k = BK, s = stages, w8 = 8 warps where the tile
// also comes with 4, b = blocks per SM when 2.
var tcTable = map[string]Config{
	// 64×64 warp tiles: 32 MMAs per 8 ldmatrix.x4 per k-slice.
	"128x128k64s4":   tc(128, 128, 64, 2, 2, 4, 8, 1),
	"128x128k64s3b2": tc(128, 128, 64, 2, 2, 3, 8, 2),
	"128x128k32s4b2": tc(128, 128, 32, 2, 2, 4, 8, 2),
	"128x256k64s3":   tc(128, 256, 64, 2, 4, 3, 8, 1),
	"128x256k32s4":   tc(128, 256, 32, 2, 4, 4, 8, 1),
	"256x128k64s3":   tc(256, 128, 64, 4, 2, 3, 8, 1),
	"64x256k64s3":    tc(64, 256, 64, 1, 4, 3, 8, 1),
	// 32×64 and 32×32 warp tiles for 16–100 tokens per expert (the weights
	// dominate there: more blocks in flight, less padding).
	"64x128k64s4b2": tc(64, 128, 64, 2, 2, 4, 8, 2),
	"32x128k64s4b2": tc(32, 128, 64, 1, 4, 4, 8, 2),
	"32x256k64s3":   tc(32, 256, 64, 1, 4, 3, 8, 1),
	// 8 warps on 64- and 128-row tiles: twice the loads in flight and the
	// MMAs split finer, for the weight-bound middle (mixtral M=256 sat at
	// 69% of the floor with 4-warp 64-row tiles or 2×-padded 128-row ones).
	"64x256k64s4w8":   tc(64, 256, 64, 2, 4, 4, 8, 1),
	"64x128k64s4w8b2": tc(64, 128, 64, 2, 4, 4, 8, 2),
	"128x128k64s4w8":  tc(128, 128, 64, 2, 4, 4, 8, 1),
	// 128-wide k stages (rows of 256 bytes): half the barriers and twice the
	// bytes per cp.async batch, for weight-bound tiles.
	"64x128k128s3w8": tc(64, 128, 128, 2, 4, 3, 8, 1),
	"32x256k128s3w8": tc(32, 256, 128, 1, 8, 3, 8, 1),
	// 16-row tiles for 1–24 slots per expert, the block shapes of the
	// tuned Triton design's winners on the H200 there (16×256×128 with 8
	// warps, 16×64–128 with 4): weights dominate, so several blocks per
	// multiprocessor keep more loads in flight.
	"16x256k128s3w8": tc(16, 256, 128, 1, 8, 3, 8, 1),
	"16x256k128s2w8": tc(16, 256, 128, 1, 8, 2, 8, 1),
	"16x256k64s4":    tc(16, 256, 64, 1, 4, 4, 8, 1),
	"16x128k64s4b2":  tc(16, 128, 64, 1, 4, 4, 8, 2),
	"16x128k64s4b3":  tc(16, 128, 64, 1, 4, 4, 8, 3),
	// Rows of 256 bytes with 4 warps, the tuned Triton design's winners at
	// 1–32 tokens on mixtral (16×64×128 and 16×128×128, 3–4 stages): more,
	// smaller tiles for a long K over few experts, where 16×256 tiles
	// leave most multiprocessors idle (mixtral M=2 gemm2: 48 tiles).
	"16x64k128s4b2":  tc(16, 64, 128, 1, 4, 4, 8, 2),
	"16x64k128s3b3":  tc(16, 64, 128, 1, 4, 3, 8, 3),
	"16x128k128s3b2": tc(16, 128, 128, 1, 4, 3, 8, 2),
	// Triton's gemm2 winner at 8–64 slots per expert (32×128×64, 3 stages),
	// three blocks per multiprocessor.
	"32x128k64s3b3": tc(32, 128, 64, 1, 4, 3, 8, 3),
}

func tc(bm, bn, bk, wm, wn, st, gm, minb int) Config {
	return Config{Kernel: "tc", BM: bm, BN: bn, BK: bk, WM: wm, WN: wn, Stages: st, GM: gm, MinBlocks: minb}
}

// Every named tc configuration also comes with the prologue overlap: the
// same name with "ov" appended.
func init() {
	for _, n := range tableNames(tcTable) {
		tcTable[n+"ov"] = ov(tcTable[n])
		if tcTable[n].BM <= 32 {
			tcTable[n+"ov2"] = ov2(tcTable[n])
		}
	}
}

// ov2 is c with the stage ring across tiles (OV 2): for the 16- and 32-row
// tiles of the weight-streaming middle, where a tile has few k-stages
// (deepseek-v3 tp8's gemm2: 2) and the loads drained at each tile's end.
func ov2(c Config) Config {
	c.OV = 2
	return c
}

func ov(c Config) Config {
	c.OV = 1
	return c
}

func warpsOr4(w int) int {
	if w == 0 {
		return 4
	}
	return w
}

// String is the configuration as --config spells it; a split one is
// gemm1's and gemm2's joined by "+".
func (c Config) String() string {
	if c.G2 != nil {
		return c.Gemm(1).String() + "+" + c.G2.String()
	}
	switch c.Kernel {
	case "":
		return "auto"
	case "skinny":
		s := fmt.Sprintf("skinny:nt=%d", c.NT)
		if warpsOr4(c.W1) != 4 || warpsOr4(c.W2) != 4 {
			s = fmt.Sprintf("skinny:nt=%d,w1=%d,w2=%d", c.NT, warpsOr4(c.W1), warpsOr4(c.W2))
		}
		// The values as set, so that an error about a bad one shows it.
		if c.FC != 0 {
			s += fmt.Sprintf(",fc=%d", c.FC)
		}
		if c.SA != 0 {
			s += fmt.Sprintf(",sa=%d", c.SA)
		}
		if c.GV != 0 {
			s += fmt.Sprintf(",gv=%d", c.GV)
		}
		return s + c.plSuffix()
	case "tc":
		// Always the full spelling: a tuned result names exactly what ran,
		// and ParseConfig reads it back.
		s := fmt.Sprintf("tc:bm=%d,bn=%d,bk=%d,wm=%d,wn=%d,stages=%d,gm=%d,minb=%d", c.BM, c.BN, c.BK, c.WM, c.WN, c.Stages, c.GM, c.MinBlocks)
		if c.OV != 0 {
			s += fmt.Sprintf(",ov=%d", c.OV)
		}
		if c.SA != 0 {
			s += fmt.Sprintf(",sa=%d", c.SA)
		}
		return s + c.plSuffix()
	case "wg":
		s := fmt.Sprintf("wg:nc=%d,bn=%d,stages=%d,gm=%d", c.NC, c.BN, c.Stages, c.GM)
		if c.PP != 0 {
			s += ",pp=1"
		}
		if c.TMA != 0 {
			s += ",tma=1"
		}
		if c.MC != 0 {
			s += fmt.Sprintf(",mc=%d", c.MC)
		}
		if c.L2 != 0 {
			s += fmt.Sprintf(",l2=%d", c.L2)
		}
		return s + c.plSuffix()
	}
	if c.Tile == "custom" {
		return fmt.Sprintf("tiled:bm=%d,bn=%d,bk=%d,wm=%d,wn=%d,stages=%d", c.BM, c.BN, c.BK, c.WM, c.WN, c.Stages)
	}
	return "tiled:" + c.Tile
}

func (c Config) plSuffix() string {
	if c.PL != 0 {
		return fmt.Sprintf(",pl=%d", c.PL)
	}
	return ""
}

// WithProgrammatic is c with gemm1's and gemm2's kernels launched
// programmatically (PL) or not, as pl1 and pl2 say.
func (c Config) WithProgrammatic(pl1, pl2 bool) Config {
	g1, g2 := c.Gemm(1), c.Gemm(2)
	g1.PL, g2.PL = b2i(pl1), b2i(pl2)
	return Split(g1, g2)
}

// Programmatic says whether any of c's launches is programmatic.
func (c Config) Programmatic() bool { return c.Gemm(1).PL != 0 || c.Gemm(2).PL != 0 }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Block is the alignment block: tokens per tile.
func (c Config) Block() int {
	if c.Kernel == "skinny" {
		return 8 * c.NT
	}
	return c.BM
}

// Threads is the block size of gemm1 (which = 1) or gemm2 (which = 2).
func (c Config) Threads(which int) int {
	if c.Kernel == "wg" {
		return 128 * (c.NC + 1)
	}
	if c.Kernel == "skinny" {
		if c.GV != 0 {
			return 32 * gvWarps
		}
		if which == 1 {
			return 32 * warpsOr4(c.W1)
		}
		return 32 * warpsOr4(c.W2)
	}
	return 32 * c.WM * c.WN
}

// SharedBytes is the GEMM kernels' dynamic shared memory: the pipeline's
// stages, and for tc without OV also the bf16 output tile the epilogue
// stages through the same memory.
func (c Config) SharedBytes() int {
	switch c.Kernel {
	case "tiled":
		return c.Stages * (c.BM + c.BN) * (c.BK + 8) * 2
	case "tc":
		if c.OV != 0 {
			return c.Stages * (c.BM + c.BN) * c.BK * 2
		}
		return max(c.Stages*(c.BM+c.BN)*c.BK*2, c.BM*c.BN*2)
	case "wg":
		// The stages, their full and empty mbarriers, the ping-pong turn
		// barriers, (mc=2) the gathered barriers, and 1 KiB to align
		// the tiles to the 128-byte swizzle's 1024-byte atoms.
		b := c.Stages*(c.BM+c.BN)*128 + 16*c.Stages + 16 + 1024
		if c.MC == 2 {
			b += 8 * c.Stages
		}
		return b
	}
	return 0
}

// staticShared is what the GEMM kernels declare as __shared__ arrays (tc:
// the tile's slots and routing weights, two sets with OV; with SA the whole
// alignment and the sort's arrays).
func (c Config) staticShared() int {
	if c.Kernel == "tc" {
		sets := 1 + c.OV
		if c.OV == 2 { // a set for this tile and each the loads may be ahead
			sets = c.Stages + 1
		}
		n := 8 * c.BM * sets
		if c.SA != 0 {
			n += 4 * (selfAlignSlots*c.BM + 3*selfAlignSlots)
		}
		return n
	}
	return 0
}

// Defines are the NVRTC -D options of the module that holds the
// configuration's kernels: a custom tiled tile's TL_* values, or one tc
// instance (MOE_TC_ONLY leaves the built-in kernels out of that module).
func (c Config) Defines() []string {
	switch {
	case c.Kernel == "tc":
		return []string{"-DMOE_TC_ONLY", "-DMOE_TC_LIST=" + c.tcEntry()}
	case c.Kernel == "wg":
		return []string{"-DMOE_TC_ONLY", "-DMOE_WG_LIST=" + c.wgEntry()}
	case c.Kernel == "tiled" && c.Tile == "custom":
		return []string{
			"-DTL_BM=" + strconv.Itoa(c.BM), "-DTL_BN=" + strconv.Itoa(c.BN), "-DTL_BK=" + strconv.Itoa(c.BK),
			"-DTL_WM=" + strconv.Itoa(c.WM), "-DTL_WN=" + strconv.Itoa(c.WN), "-DTL_STAGES=" + strconv.Itoa(c.Stages),
		}
	}
	return nil
}

// tcID names a tc instance in kernel names: its parameters.
func (c Config) tcID() string {
	id := fmt.Sprintf("%d_%d_%d_%d_%d_%d_%d_%d", c.BM, c.BN, c.BK, c.WM, c.WN, c.Stages, c.GM, c.MinBlocks)
	switch c.OV {
	case 1:
		id += "_ov"
	case 2:
		id += "_ov2"
	}
	if c.SA != 0 {
		id += "_sa"
	}
	return id
}

// wgID names a wg instance in kernel names: its parameters.
func (c Config) wgID() string {
	id := fmt.Sprintf("%d_%d_%d_%d", c.NC, c.BN, c.Stages, c.GM)
	if c.PP != 0 {
		id += "_pp"
	}
	if c.TMA != 0 {
		id += "_tma"
	}
	switch c.MC {
	case 1:
		id += "_mc"
	case 2:
		id += "_mn"
	}
	return id
}

// wgEntry is the configuration as one WG(...) entry of MOE_WG_LIST.
func (c Config) wgEntry() string {
	return fmt.Sprintf("WG(%s,%d,%d,%d,%d,%d,%d,%d)", c.wgID(), c.NC, c.BN, c.Stages, c.GM, c.PP, c.TMA, c.MC)
}

// tcEntry is the configuration as one TC(...) entry of MOE_TC_LIST (TCSA
// with a self-aligning gemm1).
func (c Config) tcEntry() string {
	macro := "TC"
	if c.SA != 0 {
		macro = "TCSA"
	}
	return fmt.Sprintf("%s(%s,%d,%d,%d,%d,%d,%d,%d,%d,%d)", macro, c.tcID(), c.BM, c.BN, c.BK, c.WM, c.WN, c.Stages, c.GM, c.MinBlocks, c.OV)
}

func (c Config) kernelNames() (g1, g2 string) {
	switch c.Kernel {
	case "skinny":
		g1 := fmt.Sprintf("moe_gemm1_skinny_nt%d_w%d", c.NT, warpsOr4(c.W1))
		g2 := fmt.Sprintf("moe_gemm2_skinny_nt%d_w%d", c.NT, warpsOr4(c.W2))
		if c.GV != 0 {
			g1, g2 = "moe_gemm1_skinny_nt1_gv", "moe_gemm2_skinny_nt1_gv"
		}
		if c.SA != 0 {
			g1 += "_sa"
		}
		if c.FC != 0 {
			g2 += "_fc"
		}
		return g1, g2
	case "tc":
		return "moe_gemm1_tc_" + c.tcID(), "moe_gemm2_tc_" + c.tcID()
	case "wg":
		return "moe_gemm1_wg_" + c.wgID(), "moe_gemm2_wg_" + c.wgID()
	}
	return "moe_gemm1_tiled_" + c.Tile, "moe_gemm2_tiled_" + c.Tile
}

// selfAlignSlots is the most slots a self-aligning gemm1 (skinny or tc
// sa=1) sorts: one thread a slot, 64-entry shared arrays (moe.cu).
const selfAlignSlots = 64

// maxBlockShared is the shared memory one block may have on sm_80/sm_90.
const maxBlockShared = 227 * 1024

// Validate checks a configuration's constraints (those moe.cu's static
// asserts would otherwise report as a compile error).
func (c Config) Validate() error {
	if c.G2 != nil {
		if c.G2.G2 != nil || c.Kernel == "" || c.G2.Kernel == "" {
			return fmt.Errorf("config %v: a split configuration joins two plain ones", c)
		}
		if c.Tile == "custom" || c.G2.Tile == "custom" {
			// A custom tile is compiled into the base module, one per run.
			return fmt.Errorf("config %v: a custom tiled tile cannot be half of a split configuration", c)
		}
		if err := c.Gemm(1).Validate(); err != nil {
			return err
		}
		return c.G2.Validate()
	}
	if c.PL != 0 && c.PL != 1 {
		return fmt.Errorf("config %v: pl must be 0 or 1", c)
	}
	if c.TMA != 0 && c.Kernel != "wg" {
		return fmt.Errorf("config %v: tma (tensor-map weight loads) is for wg kernels", c)
	}
	if c.MC != 0 && (c.Kernel != "wg" || c.MC < 0 || c.MC > 2 || c.TMA != 1 || c.PP != 0) {
		return fmt.Errorf("config %v: mc=1 and mc=2 (clusters sharing the weight or the token tile) are for wg kernels with tma=1 and no pp", c)
	}
	if c.L2 != 0 && (c.Kernel != "wg" || c.L2 != 4) {
		return fmt.Errorf("config %v: l2=4 (the gathered rows in a persisting L2 window) is for wg kernels; l2 takes 0 or 4", c)
	}
	if c.GV != 0 && c.Kernel != "skinny" {
		return fmt.Errorf("config %v: gv=1 (dot-product decode GEMMs) is for skinny kernels", c)
	}
	if c.PL != 0 && c.Kernel == "tiled" {
		return fmt.Errorf("config %v: pl (programmatic launch) is for skinny, tc and wg kernels", c)
	}
	switch c.Kernel {
	case "skinny":
		if c.NT != 1 && c.NT != 2 && c.NT != 4 {
			return fmt.Errorf("config %v: skinny nt must be 1, 2 or 4", c)
		}
		for _, w := range []int{warpsOr4(c.W1), warpsOr4(c.W2)} {
			if w != 4 && !(w == 16 && c.NT == 1) {
				return fmt.Errorf("config %v: skinny warps must be 4, or 16 with nt=1", c)
			}
		}
		if c.FC != 0 && c.FC != 1 || c.SA != 0 && c.SA != 1 || c.GV != 0 && c.GV != 1 {
			return fmt.Errorf("config %v: fc, sa and gv must be 0 or 1", c)
		}
		if c.GV != 0 && (c.NT != 1 || warpsOr4(c.W1) != 4 || warpsOr4(c.W2) != 4) {
			return fmt.Errorf("config %v: gv=1 (dot-product decode GEMMs) takes nt=1 and its own 8 warps a block (no w1, w2)", c)
		}
		return nil
	case "tiled":
		if c.WM < 1 || c.WN < 1 || c.WM*c.WN > 16 || c.Stages < 2 || c.BK < 16 || c.BK%16 != 0 {
			return fmt.Errorf("config %v: want wm, wn ≥ 1 with wm·wn ≤ 16 warps, stages ≥ 2, bk a multiple of 16", c)
		}
		if c.BM%(16*c.WM) != 0 {
			return fmt.Errorf("config %v: bm must be a multiple of 16·wm", c)
		}
		if c.BN%(32*c.WN) != 0 {
			return fmt.Errorf("config %v: bn must be a multiple of 32·wn (gate and up halves per warp)", c)
		}
		if c.SharedBytes() > maxBlockShared {
			return fmt.Errorf("config %v: needs %d bytes of shared memory, more than the 227 KiB a block may have", c, c.SharedBytes())
		}
		return nil
	case "tc":
		return c.validateTC()
	case "wg":
		if c.NC != 1 && c.NC != 2 {
			return fmt.Errorf("config %v: nc must be 1 or 2 consumer warpgroups", c)
		}
		if c.BN != 64 && c.BN != 128 && c.BN != 256 {
			return fmt.Errorf("config %v: bn must be 64, 128 or 256 (a wgmma N)", c)
		}
		if c.Stages < 3 || c.GM < 1 || c.PP < 0 || c.PP > 1 || (c.PP == 1 && c.NC != 2) || c.TMA < 0 || c.TMA > 1 {
			return fmt.Errorf("config %v: want stages ≥ 3, gm ≥ 1, pp 0 or 1 (pp=1 with nc=2), tma 0 or 1", c)
		}
		if want := 64 * c.NC; c.PP == 1 {
			want = 64
			if c.BM != want {
				return fmt.Errorf("config %v: bm %d, want %d", c, c.BM, want)
			}
		} else if c.BM != want {
			return fmt.Errorf("config %v: bm %d, want %d", c, c.BM, want)
		}
		if n := c.SharedBytes(); n > maxBlockShared {
			return fmt.Errorf("config %v: needs %d bytes of shared memory, more than the 227 KiB a block may have", c, n)
		}
		return nil
	}
	return fmt.Errorf("config %v: kernel must be skinny, tiled, tc or wg", c)
}

func (c Config) validateTC() error {
	if c.WM < 1 || c.WN < 1 || c.WM*c.WN > 16 || c.Stages < 2 || c.GM < 1 || c.MinBlocks < 1 || c.MinBlocks > 4 || c.OV < 0 || c.OV > 2 {
		return fmt.Errorf("config %v: want wm, wn ≥ 1 with wm·wn ≤ 16 warps, stages ≥ 2, gm ≥ 1, minb 1–4, ov 0, 1 or 2", c)
	}
	if c.SA != 0 && (c.SA != 1 || 32*c.WM*c.WN < selfAlignSlots) {
		return fmt.Errorf("config %v: sa=1 (the alignment fused into gemm1) needs at least %d threads, one a slot", c, selfAlignSlots)
	}
	if c.BK != 32 && c.BK != 64 && c.BK != 128 {
		return fmt.Errorf("config %v: bk must be 32, 64 or 128 (swizzled rows of 64, 128 or 256 bytes)", c)
	}
	if c.BM%(16*c.WM) != 0 {
		return fmt.Errorf("config %v: bm must be a multiple of 16·wm", c)
	}
	// A warp's columns: gate and up halves of 16 or more each, or one
	// n-tile of each (16).
	if wtn := c.BN / c.WN; c.BN%c.WN != 0 || (wtn != 16 && wtn%32 != 0) {
		return fmt.Errorf("config %v: bn/wn must be 16 or a multiple of 32 (gate and up halves per warp)", c)
	}
	if c.BN != 64 && c.BN%128 != 0 {
		return fmt.Errorf("config %v: bn must be 64 or a multiple of 128 (swizzled output rows)", c)
	}
	// One pass of the block's 16-byte loads covers rstep rows; the swizzle
	// phase repeats every 16 rows, or 8 for rows of 128 bytes and more.
	rstep, phase := 32*c.WM*c.WN/(c.BK/8), 16
	if c.BK >= 64 {
		phase = 8
	}
	if rstep%phase != 0 || c.BM%rstep != 0 || (c.BN/2)%rstep != 0 {
		return fmt.Errorf("config %v: the block's loads cover %d rows a pass: it must be a multiple of %d dividing bm and bn/2", c, rstep, phase)
	}
	if n := c.SharedBytes() + c.staticShared(); n > maxBlockShared {
		return fmt.Errorf("config %v: needs %d bytes of shared memory, more than the 227 KiB a block may have", c, n)
	}
	return nil
}

// CheckConfigShape reports a configuration that cannot run a shape at a
// batch size: the tc kernels address tokens and weights with 32-bit element
// offsets.
func CheckConfigShape(c Config, s Shape, m int) error {
	if c.G2 != nil {
		if err := CheckConfigShape(c.Gemm(1), s, m); err != nil {
			return err
		}
		return CheckConfigShape(*c.G2, s, m)
	}
	if (c.Kernel == "skinny" || c.Kernel == "tc") && c.SA != 0 && m*s.K > selfAlignSlots {
		return fmt.Errorf("config %v: a self-aligning gemm1 takes at most %d slots; M=%d has %d", c, selfAlignSlots, m, m*s.K)
	}
	if c.Kernel != "tc" && c.Kernel != "wg" {
		return nil
	}
	if c.TMA != 0 && (s.H%8 != 0 || s.I%8 != 0) {
		return fmt.Errorf("config %v: tma=1 needs the hidden and intermediate sizes to be multiples of 8 (a tensor map's row pitch is a multiple of 16 bytes); shape %v", c, s)
	}
	const lim = 1 << 32
	slots := int64(m) * int64(s.K)
	if slots*int64(max(s.H, s.I)) >= lim || 2*int64(s.I)*int64(s.H) >= lim {
		return fmt.Errorf("config %v: shape %v at M=%d exceeds the tc kernels' 32-bit element offsets", c, s, m)
	}
	return nil
}

// ParseConfig parses --config: "auto" (empty Config), "skinny:nt=N[,w1=W,w2=W]",
// "tiled:NAME" or "tiled:bm=…,bn=…,bk=…,wm=…,wn=…,stages=…" (a custom tile,
// compiled with -D options; unset keys default to m64's), "tc:NAME" or
// "tc:bm=…,bn=…,bk=…,wm=…,wn=…,stages=…,gm=…,minb=…[,ov=0|1]" (unset keys
// default to 128x128k64s4's); "GEMM1+GEMM2" gives each GEMM its own, e.g.
// "skinny:nt=1+tc:32x128k64s3b3".
func ParseConfig(s string) (Config, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "" || s == "auto" {
		return Config{}, nil
	}
	if a, b, ok := strings.Cut(s, "+"); ok {
		g1, err := parseOne(a)
		if err != nil {
			return Config{}, err
		}
		g2, err := parseOne(b)
		if err != nil {
			return Config{}, err
		}
		if g1.Kernel == "" || g2.Kernel == "" {
			return Config{}, fmt.Errorf("bad config %q: a split configuration GEMM1+GEMM2 needs both halves (an empty or auto half is not a configuration)", s)
		}
		c := Split(g1, g2)
		return c, c.Validate()
	}
	return parseOne(s)
}

func parseOne(s string) (Config, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "auto" {
		return Config{}, nil
	}
	if strings.Contains(s, "+") {
		return Config{}, fmt.Errorf("bad config %q: at most two halves, GEMM1+GEMM2", s)
	}
	kind, rest, _ := strings.Cut(s, ":")
	switch kind {
	case "skinny":
		c := Config{Kernel: "skinny", NT: 1}
		for _, kv := range strings.Split(rest, ",") {
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			n, err := strconv.Atoi(v)
			if !ok || err != nil {
				return Config{}, fmt.Errorf("bad config %q: want skinny:nt=1|2|4[,w1=4|16][,w2=4|16][,fc=1][,sa=1][,gv=1][,pl=1]", s)
			}
			switch k {
			case "nt":
				c.NT = n
			case "w1":
				c.W1 = n
			case "w2":
				c.W2 = n
			case "fc":
				c.FC = n
			case "sa":
				c.SA = n
			case "gv":
				c.GV = n
			case "pl":
				c.PL = n
			default:
				return Config{}, fmt.Errorf("bad config %q: unknown key %q (want nt, w1, w2, fc, sa, gv, pl)", s, k)
			}
		}
		return c, c.Validate()
	case "tiled":
		if c, ok := tiledTable[rest]; ok {
			return c, nil
		}
		c := tiledTable["m64"]
		c.Tile = "custom"
		if err := parseKeys(s, rest, &c, []string{"bm", "bn", "bk", "wm", "wn", "stages"}); err != nil {
			return Config{}, err
		}
		return c, c.Validate()
	case "tc":
		if c, ok := tcTable[rest]; ok {
			return c, nil
		}
		c := tcTable["128x128k64s4"]
		if err := parseKeys(s, rest, &c, []string{"bm", "bn", "bk", "wm", "wn", "stages", "gm", "minb", "ov", "sa", "pl"}); err != nil {
			return Config{}, err
		}
		return c, c.Validate()
	case "wg":
		if c, ok := wgTable[rest]; ok {
			return c, nil
		}
		c := wgTable["128x256s4"]
		if err := parseKeys(s, rest, &c, []string{"nc", "bn", "stages", "gm", "pp", "tma", "mc", "l2", "pl"}); err != nil {
			return Config{}, err
		}
		c.BM = 64 * c.NC
		if c.PP == 1 {
			c.BM = 64
		}
		return c, c.Validate()
	}
	return Config{}, fmt.Errorf("bad config %q: want auto, skinny:nt=N[,w1=W,w2=W], tiled:NAME (%s) or tiled:bm=…,bn=…, tc:NAME (%s) or tc:bm=…,bn=…, wg:NAME (%s) or wg:nc=…,bn=…,stages=…,gm=…",
		s, strings.Join(tableNames(tiledTable), ", "), strings.Join(tableNames(tcTable), ", "), strings.Join(tableNames(wgTable), ", "))
}

func parseKeys(s, rest string, c *Config, keys []string) error {
	fields := map[string]*int{"nc": &c.NC, "pp": &c.PP, "bm": &c.BM, "bn": &c.BN, "bk": &c.BK, "wm": &c.WM, "wn": &c.WN, "stages": &c.Stages, "gm": &c.GM, "minb": &c.MinBlocks, "ov": &c.OV, "sa": &c.SA, "pl": &c.PL, "tma": &c.TMA, "mc": &c.MC, "l2": &c.L2}
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 || (n == 0 && k != "ov" && k != "pp" && k != "pl" && k != "tma" && k != "mc" && k != "sa" && k != "l2") {
			return fmt.Errorf("bad config %q: %q is not key=positive integer (pp, pl, tma, sa: 0 or 1; ov, mc: 0 to 2; l2: 0 or 4)", s, kv)
		}
		known := false
		for _, name := range keys {
			if k == name {
				*fields[k] = n
				known = true
			}
		}
		if !known {
			return fmt.Errorf("bad config %q: unknown key %q (want %s)", s, k, strings.Join(keys, ", "))
		}
	}
	return nil
}

func tableNames(t map[string]Config) []string {
	var out []string
	for n := range t {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TCConfigs is every named tc configuration, in name order.
func TCConfigs() []Config {
	var out []Config
	for _, n := range tableNames(tcTable) {
		out = append(out, tcTable[n])
	}
	return out
}

// perExpert is the mean number of slots per touched expert under uniform
// routing: what decides between the kernel families.
func perExpert(s Shape, m int) float64 {
	return float64(m*s.K) / float64(touchedExperts(s, m))
}

// touchedExperts is how many experts m tokens touch under uniform routing,
// as perExpert counts them: every slot another expert, up to E.
func touchedExperts(s Shape, m int) int { return max(1, min(s.E, m*s.K)) }

// ChooseConfig is the configuration table, from the H200 tuning sweep of
// the four reference shapes (reports/measured/h200/moe-tune-v4.txt, kernels/moe/NOTES.md),
// by the mean number of slots per touched expert under uniform routing: the
// decode kernel up to ~6 (fastest at every M ≤ 64 there, 85–98% of the
// floor from M=16), the tc kernel with 32×256 tiles up to 64 (fastest or
// within 3% at every such point), and 128×256 tiles beyond (fastest
// everywhere but deepseek-v3 tp8 at M=4096, where 64×128 tiles are 3.5%
// faster). `mstar bench moe --tune` measures the alternatives (Candidates).
func ChooseConfig(s Shape, m int) Config { return ChooseConfigOn(0, s, m) }

// Hopper is the compute capability (major*10+minor) of the GPUs the wg
// kernels run on.
const Hopper = 90

// GPU is what the static table knows of a device.
type GPU struct {
	CC  int // compute capability, major*10+minor; 0 when unknown
	SMs int // multiprocessors; 0 when unknown (then hopperSMs)
}

// hopperSMs is the multiprocessor count of the H100 SXM and the H200, the
// static table's wave arithmetic where a caller knows only the compute
// capability.
const hopperSMs = 132

// ChooseConfigOn is ChooseConfigFor a GPU of compute capability cc whose
// multiprocessors are not known.
func ChooseConfigOn(cc int, s Shape, m int) Config { return ChooseConfigFor(GPU{CC: cc}, s, m) }

// ChooseConfigFor is ChooseConfig for GPU g. On Hopper, by slots per
// touched expert:
//   - up to 2, and up to 8 where 16×256 tiles would leave the last wave
//     under three quarters full (fillsWaves), the tc kernel's 16×64×128
//     tiles with the prologue overlapped (ov=2) and, at 64 slots or fewer,
//     the alignment fused into gemm1 (sa=1); up to 8 otherwise its 16×256×128
//     tiles. Fitted to the H200 tunings of v34 and v38, the H100 tunings of
//     v29 and v32 and an H100 tune of an odd shape (E60 k4 H1536 I352) by
//     each GEMM's time against the batch's best (kernels/moe/NOTES.md,
//     v45; TestStaticTableFitsTunes): over those 48, 38 and 57 batches
//     the pick's GEMMs went from 1.096, 1.057 and 1.032 of the best
//     (geometric mean) to 1.020, 1.020 and 1.015, the worst from 2.04 to
//     1.14. 16×256 tiles
//     launch a quarter of the blocks: at a few slots per expert, or on a
//     narrow shape, too few to fill the machine. The 16×64 pick launches
//     both GEMMs programmatically (pl=1; NOTES v46).
//   - up to 32, 32×256×128 tiles, or the 16×64 ones where those would not
//     fill their waves (the odd shape at M = 128–256: 1.09–1.13× the best
//     against 1.01–1.03);
//   - from 32 the wg kernel with tensor-map weight loads, fitted by
//     scripts/moe-static-fit.py to the H200 tune of v25 and the H100 tune
//     of v29 (the same wg kernels; 28 batches at 32–1024 slots per expert):
//     64-row ping-pong tiles at 32–63 and 128–255, cooperative 128-row
//     tiles with 3 stages at 64–127 and with 4 from 256, each within 1.5,
//     2.8, 4.2 and 2.4% of its batch's best pass. The picks before tensor
//     maps (ping-pong from 32, cooperative from 256, no tma) were up to 20%
//     slower than the tuned files there (mixtral M=256 on the H200, 28% on
//     the H100); they stay for shapes a tensor map cannot load (H or I not
//     a multiple of 8).
func ChooseConfigFor(g GPU, s Shape, m int) Config {
	if g.CC == Hopper {
		per := perExpert(s, m)
		// narrow is the 16×64 tile, self-aligning where it can, both GEMMs
		// launched programmatically (v46: the tunes' pick with and without
		// pl, 0.3–1.7 µs faster in each of the 16 batches that timed both).
		narrow := func() Config {
			c := tcTable["16x64k128s4b2"]
			c.OV = 2
			if sa, ok := SelfAligning(c, s, m); ok {
				c = sa
			}
			c.PL = 1
			return c
		}
		var c Config
		switch {
		case per >= 256:
			c = wgTable["128x256s4tma"]
		case per >= 128:
			c = wgTable["64x256s4pptma"]
		case per >= 64:
			c = wgTable["128x256s3tma"]
		case per >= wgLoad:
			c = wgTable["64x256s4pptma"]
		case per > 8:
			c = tcTable["32x256k128s3w8"]
			if !fillsWaves(g, s, m, 32, 256) {
				c = narrow()
			}
		case per > 2 && fillsWaves(g, s, m, 16, 256):
			c = tcTable["16x256k128s3w8ov"]
		default:
			c = narrow()
		}
		if c.TMA != 0 && CheckConfigShape(c, s, m) != nil {
			// No tensor map for this shape: the cp.async twins.
			c = wgTable["128x256s4"]
			if per < 256 {
				c = wgTable["64x256s4pp"]
			}
		}
		if c.Kernel != "" && CheckConfigShape(c, s, m) == nil {
			return c
		}
	}
	return chooseConfig(s, m)
}

// wgLoad is the slots per touched expert from which the Hopper table picks
// wg tiles; below it, tc tiles.
const wgLoad = 32

// RankTokens is how many tokens give, without expert parallelism, the load
// rank 0 of ep ranks holds at batch m: it holds about m·K/ep of the m·K
// slots, on its E/ep experts, as m/ep tokens would there.
func RankTokens(m, ep int) int {
	if ep <= 1 {
		return m
	}
	return max(1, (m+ep-1)/ep)
}

// ChooseConfigOnRank is ChooseConfigFor for rank 0 of ep expert-parallel
// ranks (s its local shape). The table chooses by slots per touched expert,
// which m reads ep× too high there (--ep 4 over deepseek-v3 tp8 at M=256:
// 32 where there are 8). Below the wg range it picks at the rank's load
// (RankTokens); from there on, at m. On an H100 (12 EP cells,
// reports/measured/h100/moe-ep-load) the rank's load won 2.6–11.3% in three
// of the four tc-range cells that changed and lost 1.1% in one; in the wg
// range it won two (1.8, 2.0%) and lost two (1.9, 8.5%).
func ChooseConfigOnRank(g GPU, s Shape, m, ep int) Config {
	if mr := RankTokens(m, ep); mr != m && perExpert(s, mr) < wgLoad {
		if c, ok := RunnableAt(ChooseConfigFor(g, s, mr), s, m); ok {
			return c
		}
	}
	return ChooseConfigFor(g, s, m)
}

// RunnableAt is c where it runs at batch m, else c without self-alignment
// where that does: a self-aligning gemm1 sorts all m·K slots (under EP the
// other ranks' dropped ones too), and a pick for fewer tokens can have too
// many.
func RunnableAt(c Config, s Shape, m int) (Config, bool) {
	if CheckConfigShape(c, s, m) == nil {
		return c, true
	}
	g1 := c.Gemm(1)
	g1.SA = 0
	c = Split(g1, c.Gemm(2))
	return c, CheckConfigShape(c, s, m) == nil
}

// fillsWaves says whether tiles of bm×bn rows and columns, one block a
// multiprocessor, keep both GEMMs' last wave at least three quarters full
// under uniform routing (perExpert's touched experts, each its slots in
// bm-row tiles): a GEMM of 180 tiles on 132 multiprocessors runs two waves
// for 1.36 waves of work.
func fillsWaves(g GPU, s Shape, m, bm, bn int) bool {
	sms := g.SMs
	if sms <= 0 {
		sms = hopperSMs
	}
	slots, touched := m*s.K, touchedExperts(s, m)
	rows := touched * ((slots + touched*bm - 1) / (touched * bm)) // ⌈per/bm⌉ tiles an expert
	for _, n := range []int{2 * s.I, s.H} {
		tiles := rows * ((n + bn - 1) / bn)
		waves := (tiles + sms - 1) / sms
		if 4*tiles < 3*waves*sms {
			return false
		}
	}
	return true
}

func chooseConfig(s Shape, m int) Config {
	per := perExpert(s, m)
	switch {
	case per <= 6:
		touched := touchedExperts(s, m)
		return Config{Kernel: "skinny", NT: 1, W1: skinnyWarps(s.I, s.H, touched), W2: skinnyWarps(s.H, s.I, touched)}
	}
	c := tcTable["128x256k64s3"]
	if per <= 64 {
		c = tcTable["32x256k64s3"]
	}
	if CheckConfigShape(c, s, m) != nil {
		// Past the tc kernels' 32-bit offsets: the tiled kernel's 64-bit ones.
		return tiledTable["w128x128"]
	}
	return c
}

// Candidates are the configurations the tuner tries for a shape and batch:
// ChooseConfig's pick first, then the ones that can win at this many slots
// per touched expert (decode kernels up to ~12, 16-token tiles up to ~24,
// 32-token tiles from ~3 to ~64, 64-token tiles from ~16, 128- and
// 256-token tiles from ~48), each once.
func Candidates(s Shape, m int) []Config { return CandidatesOn(0, s, m) }

// CandidatesFor is CandidatesOn with ChooseConfigFor(g)'s pick first.
func CandidatesFor(g GPU, s Shape, m int) []Config { return candidatesOn(g, s, m) }

// CandidatesOn is Candidates for a GPU of compute capability cc, with
// ChooseConfigOn's pick first. On Hopper it leaves out the configurations
// that were never within 3% of the best gemm1, gemm2 or pass time in any
// batch of two full H200 tunings of the four reference shapes (dominated),
// unless MSTAR_MOE_TUNE_ALL is set: over the four shapes' 13 batches, 792
// candidates instead of 1325, and 18 tc modules to compile instead of 44.
func CandidatesOn(cc int, s Shape, m int) []Config { return candidatesOn(GPU{CC: cc}, s, m) }

func candidatesOn(g GPU, s Shape, m int) []Config {
	per := perExpert(s, m)
	return candidatesOver(g, s, m, per, per)
}

// CandidatesUnder is CandidatesFor for a batch routed by r (local expert
// ids): where r is skewed its hot experts hold many times the uniform
// mean's slots, and the families the candidates come from are chosen by
// that mean, so the families up to r's slot-weighted load join them (under
// zipf:1.2 at deepseek-v3 tp8 M=256 the hottest expert holds 233 of 2048
// slots, the uniform mean is 8, and triton-ref's tune picks 64-row tiles
// that the uniform range leaves out). An unskewed r gives CandidatesFor's
// list exactly.
func CandidatesUnder(g GPU, s Shape, m int, r routing.Routing) []Config {
	per := perExpert(s, m)
	if l := SlotWeightedLoad(r, s.E); l > 2*per+1 {
		return candidatesOver(g, s, m, per, l)
	}
	return candidatesOver(g, s, m, per, per)
}

// SlotWeightedLoad is how many slots share a slot's expert, averaged over
// r's slots on experts 0..e-1 (Σc²/Σc over the experts' slot counts c; 0
// for none). Under uniform routing it is about the mean slots per touched
// expert plus one; under a skewed one, far more.
func SlotWeightedLoad(r routing.Routing, e int) float64 {
	count := make([]float64, e)
	for i, id := range r.IDs {
		if id >= 0 && int(id) < e && (r.Dropped == nil || !r.Dropped[i]) {
			count[id]++
		}
	}
	var sum, sq float64
	for _, c := range count {
		sum += c
		sq += c * c
	}
	if sum == 0 {
		return 0
	}
	return sq / sum
}

// candidatesOver lists the candidates of the families whose slots-per-
// expert ranges meet [lo, hi], the static pick first.
func candidatesOver(g GPU, s Shape, m int, lo, hi float64) []Config {
	out := candidates(ChooseConfigFor(g, s, m), s, m, lo, hi)
	if g.CC == Hopper && os.Getenv(EnvTuneAll) == "" {
		kept := out[:1] // the static pick stays, as the baseline
		for _, c := range out[1:] {
			if !dominatedOnHopper(c) {
				kept = append(kept, c)
			}
		}
		out = kept
	}
	return filterCandidates(out, os.Getenv(EnvTuneFilter))
}

// EnvTuneAll set to anything makes the tuner try every candidate on
// Hopper too, the dominated ones included (for a shape or routing far from
// the four the pruning was measured on).
const EnvTuneAll = "MSTAR_MOE_TUNE_ALL"

// hopperDominated names the dominated configurations by their table names
// (a tc entry with its ov and ov2 twins). From reports/measured/h200/moe-fused/tune
// and moe-next/tune (91 batches, 2168 timed candidates): on sm_90 the wg
// kernels and the 16/32-row tc tiles beat them everywhere; the tiled kernel
// is tc's predecessor, the bn=128 wg tiles lose to bn=256, and the 128-row
// tc tiles spill there (ptxas: 28–104 bytes). From moe-v18b/tune and
// moe-v19/tune (52 batches each): 64x256k64s4w8 and its ov twin never came
// within 2% of the batch's best pass or GEMM, and 128x256s3 not within 2%
// of its tma twin.
var hopperDominated = map[string][]string{
	"tiled": {"m16", "m32", "m64", "w128x128"},
	"tc": {"32x128k64s4b2", "32x128k64s3b3", "64x128k64s4b2", "64x256k64s3", "64x128k64s4w8b2", "64x128k128s3w8",
		"128x128k64s4", "128x128k64s3b2", "128x128k32s4b2", "128x128k64s4w8", "128x256k64s3", "128x256k32s4", "256x128k64s3",
		"64x256k64s4w8"},
	"wg": {"64x128s4", "64x128s6pp", "128x128s6", "128x256s3"},
}

func dominatedOnHopper(c Config) bool {
	base := c
	base.OV = 0
	tables := map[string]map[string]Config{"tiled": tiledTable, "tc": tcTable, "wg": wgTable}
	for _, name := range hopperDominated[c.Kernel] {
		if d, ok := tables[c.Kernel][name]; ok && d.String() == base.String() {
			return true
		}
	}
	return false
}

func candidates(first Config, s Shape, m int, lo, hi float64) []Config {
	// in: the family for a ≤ slots per expert ≤ b meets [lo, hi].
	in := func(a, b float64) bool { return lo <= b && hi >= a }
	inf := math.Inf(1)
	touched := touchedExperts(s, m)
	out := []Config{first}
	add := func(base ...Config) {
		var cs []Config
		for _, c := range base {
			cs = append(cs, c)
			if c.Kernel == "tc" && c.OV == 0 {
				cs = append(cs, ov(c)) // each tc candidate with and without the prologue overlap
				if c.BM <= 32 {
					cs = append(cs, ov2(c)) // and the small tiles with the stage ring across tiles
				}
			}
		}
		for _, c := range cs {
			dup := false
			for _, o := range out {
				if o.String() == c.String() {
					dup = true
				}
			}
			if !dup && CheckConfigShape(c, s, m) == nil {
				out = append(out, c)
			}
		}
	}
	if in(0, 12) {
		add(Config{Kernel: "skinny", NT: 1, W1: skinnyWarps(s.I, s.H, touched), W2: skinnyWarps(s.H, s.I, touched)},
			Config{Kernel: "skinny", NT: 1}, Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16})
		if m <= 32 {
			// The combine fused into gemm2: its last blocks sum M·16
			// outputs each, cheap only for few tokens; up to 64 slots
			// also the alignment fused into gemm1.
			w1, w2 := skinnyWarps(s.I, s.H, touched), skinnyWarps(s.H, s.I, touched)
			add(Config{Kernel: "skinny", NT: 1, W1: w1, W2: w2, FC: 1}, Config{Kernel: "skinny", NT: 1, FC: 1},
				Config{Kernel: "skinny", NT: 1, W1: w1, W2: w2, FC: 1, SA: 1}, Config{Kernel: "skinny", NT: 1, W1: w1, W2: w2, SA: 1})
		}
		if hi > 2 {
			add(Config{Kernel: "skinny", NT: 2})
		}
		if hi > 6 {
			add(Config{Kernel: "skinny", NT: 4})
		}
	}
	if in(0, 24) {
		add(tcTable["16x256k128s3w8"], tcTable["16x256k128s2w8"], tcTable["16x256k64s4"], tcTable["16x128k64s4b2"], tcTable["16x128k64s4b3"],
			tcTable["16x64k128s4b2"], tcTable["16x64k128s3b3"], tcTable["16x128k128s3b2"])
	}
	if in(3, 64) {
		add(tiledTable["m16"], tiledTable["m32"], tcTable["32x128k64s4b2"], tcTable["32x256k64s3"], tcTable["32x256k128s3w8"],
			tcTable["32x128k64s3b3"])
	}
	if in(16, 256) {
		add(tiledTable["m64"], tcTable["64x128k64s4b2"], tcTable["64x256k64s3"], tcTable["64x256k64s4w8"], tcTable["64x128k64s4w8b2"],
			tcTable["64x128k128s3w8"])
	}
	if in(48, inf) {
		add(tiledTable["w128x128"], tcTable["128x128k64s4"], tcTable["128x128k64s3b2"], tcTable["128x128k32s4b2"],
			tcTable["128x128k64s4w8"], tcTable["128x256k64s3"], tcTable["128x256k32s4"])
	}
	if in(128, inf) {
		add(tcTable["256x128k64s3"])
	}
	// The Hopper wg kernels (refused on other GPUs, so a tuner there
	// rejects them with the reason).
	if in(12, inf) {
		add(wgTable["64x128s4"], wgTable["64x256s4"], wgTable["64x256s4pp"], wgTable["64x256s5pp"], wgTable["64x128s6pp"],
			wgTable["64x256s4tma"], wgTable["64x256s4pptma"], wgTable["64x256s5pptma"], wgTable["64x256s4mc"])
	}
	if in(40, inf) {
		add(wgTable["128x128s6"], wgTable["128x256s3"], wgTable["128x256s4"], wgTable["128x256s3tma"], wgTable["128x256s4tma"],
			wgTable["128x256s3mc"], wgTable["128x256s4mc"])
	}
	return out
}

// SelfAligning is c with gemm1 fusing the alignment (sa=1) where gemm1 is a
// tc kernel that does not yet and can (64 threads or more, the batch 64
// slots or fewer); ok is false otherwise. The tuner tries it on the fastest
// candidate of a batch rather than listing a twin of every tc candidate:
// the fusion saves the same launch whatever the tile (skinny's sa twins are
// candidates of their own).
func SelfAligning(c Config, s Shape, m int) (Config, bool) {
	g1 := c.Gemm(1)
	if g1.Kernel != "tc" || g1.SA != 0 {
		return Config{}, false
	}
	g1.SA = 1
	v := Split(g1, c.Gemm(2))
	if v.Validate() != nil || CheckConfigShape(v, s, m) != nil {
		return Config{}, false
	}
	return v, true
}

// TrafficVariants is c with its wg GEMMs moving the gathered token rows
// another way (gemm1's twin, gemm2's, both): the L2 window (l2=4), and
// mc=2 clusters, where each block of a pair over an m-tile's two n-tiles
// gathers half of the rows and copies it into its peer (a GEMM qualifies
// with tensor-map weights, cooperative consumers and two n-tiles or more,
// and not as a 128-row gemm1: clusterOffered; an mc=1 GEMM's twin trades
// its weight multicast for it). The tuner
// times them after the batch's fastest configuration, and again after the
// fastest of those, instead of listing twins of every wg candidate: each
// pays in some cells only (an H100, v33: l2=4 −3 to −4% a GEMM at M=1024
// and 20–90% slower at 4096; mc=2 −4% on deepseek-v3 tp8's gemm1 at 4096,
// +20% on qwen3-30b-a3b's). The timed replays reuse one x, so with l2=4
// the rows one call leaves persisting are there for the next call's first
// reads; that favours l2=4 by at most x's size read from DRAM (14.7 MB,
// ~5 µs on an H100, of the 25 µs it saved on deepseek's gemm1 at M=1024),
// while its gain is the topk re-reads. Variants that do not fit s at m are
// left out.
func TrafficVariants(c Config, s Shape, m int) []Config {
	g1, g2 := c.Gemm(1), c.Gemm(2)
	// window and cluster give a GEMM's twin, or false where it has none.
	window := func(g Config, _ int) (Config, bool) {
		ok := g.Kernel == "wg" && g.L2 == 0
		g.L2 = 4
		return g, ok
	}
	cluster := func(g Config, gemm int) (Config, bool) {
		// Output columns: gemm1's are the intermediate (a tile's BN rows
		// are its gate and up halves), gemm2's the hidden.
		cols, outn := s.H, g.BN
		if gemm == 1 {
			cols, outn = s.I, g.BN/2
		}
		ok := g.Kernel == "wg" && g.MC != 2 && g.TMA == 1 && g.PP == 0 && outn > 0 && (cols+outn-1)/outn >= 2 && clusterOffered(g, gemm)
		g.MC = 2
		return g, ok
	}
	var vs []Config
	seen := map[string]bool{c.String(): true}
	for _, twin := range []func(Config, int) (Config, bool){window, cluster} {
		t1, ok1 := twin(g1, 1)
		t2, ok2 := twin(g2, 2)
		for _, p := range []struct {
			a, b Config
			ok   bool
		}{{t1, g2, ok1}, {g1, t2, ok2}, {t1, t2, ok1 && ok2}} {
			if !p.ok {
				continue
			}
			v := Split(p.a, p.b)
			if seen[v.String()] || v.Validate() != nil || CheckConfigShape(v, s, m) != nil {
				continue
			}
			seen[v.String()] = true
			vs = append(vs, v)
		}
	}
	return vs
}

// clusterOffered says whether the tuner offers g's mc=2 twin as gemm 1 or
// 2. Not a cooperative gemm1 (nc=2): its producer runs under setmaxnreg 40,
// and on sm_90a ptxas spills one value of it there (8 B of local memory,
// its unit count: reports/measured/h200/moe-v34/call1/local-*.txt). It
// runs correctly, and the H200 tune that timed it picked it nowhere; the
// fix waits in kernels/moe/next until a GPU shows it compiles clean.
func clusterOffered(g Config, gemm int) bool {
	return !(gemm == 1 && g.NC == 2)
}

// EnvTuneFilter names a regular expression: the tuner then tries only the
// candidates whose configuration string matches it (the static table's
// pick is always kept, as the baseline), e.g. MSTAR_MOE_TUNE_FILTER='^wg:'.
const EnvTuneFilter = "MSTAR_MOE_TUNE_FILTER"

func filterCandidates(cs []Config, expr string) []Config {
	if expr == "" {
		return cs
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return cs // a bad filter filters nothing; ValidateTuneFilter reports it
	}
	out := cs[:1]
	for _, c := range cs[1:] {
		if re.MatchString(c.String()) {
			out = append(out, c)
		}
	}
	return out
}

// ValidateTuneFilter reports a MSTAR_MOE_TUNE_FILTER that is not a regular expression.
func ValidateTuneFilter() error {
	if v := os.Getenv(EnvTuneFilter); v != "" {
		if _, err := regexp.Compile(v); err != nil {
			return fmt.Errorf("%s=%q: %v", EnvTuneFilter, v, err)
		}
	}
	return nil
}

// skinnyWarps splits K over 16 warps when a skinny GEMM's grid (16-row tiles
// × token groups) is small — up to 2048 blocks, a few per multiprocessor —
// and K is long enough to split: more loads in flight. On the H200 this took
// deepseek-v3 --tp 8 at M=1 from 77 to 40 µs.
func skinnyWarps(n, k, groups int) int {
	if (n+15)/16*groups <= 2048 && k >= 2048 {
		return 16
	}
	return 4
}

// CheckCUDAShape reports shapes the CUDA kernels do not handle.
func CheckCUDAShape(s Shape) error {
	if s.H%8 != 0 || s.I%8 != 0 {
		return fmt.Errorf("shape %v: the CUDA kernels need hidden and inter sizes that are multiples of 8", s)
	}
	if s.E > 1024 {
		return fmt.Errorf("shape %v: the CUDA alignment kernel handles at most 1024 local experts", s)
	}
	return nil
}
