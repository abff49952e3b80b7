package moe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/kernels/routing"
)

// The CPU emulator (emu/emu.h, emu/emu_main.cpp) builds moe.cu as C++ and
// runs a plan's launch list with one fiber per CUDA thread: mma.sync and
// ldmatrix with the PTX fragment layouts, cp.async groups that land early or
// late, warps drifting apart between barriers, shared-memory and buffer
// bounds checked. It is how kernels are checked on a machine without a GPU;
// the GPU tests (cuda_test.go) remain the word of the hardware.

type emuBuild struct {
	once sync.Once
	bin  string
	err  error
}

var emu struct {
	mu     sync.Mutex
	dir    string
	builds map[string]*emuBuild
}

func TestMain(m *testing.M) {
	code := m.Run()
	if emu.dir != "" {
		os.RemoveAll(emu.dir)
	}
	os.Exit(code)
}

// emuTestConfigs are tc configurations built into the emulator besides the
// named ones: odd corners of the kernel (two stages, no grouping, 16-row
// warp tiles, 64-wide n tiles, 4×1 warps).
var emuTestConfigs = []Config{
	tc(32, 64, 32, 1, 2, 2, 1, 1),
	tc(64, 128, 32, 4, 1, 3, 3, 1),
	tc(16, 128, 64, 1, 4, 2, 2, 1),
}

// emuWGTestConfigs are wg configurations built into the emulator besides
// the named ones: the fewest stages, no grouping, 64-wide n tiles.
// Their tma=1 twins load the weight tiles through a tensor map, the mc=1
// ones run in clusters of two sharing them, and the mc=2 ones in clusters
// of two sharing the gathered token rows.
// emuSATestConfigs are tc configurations whose gemm1 self-aligns (sa=1):
// 8 and 4 warps, each ov mode, 16- and 32-row tiles.
var emuSATestConfigs = []Config{selfAligned(ov2(tcTable["16x256k128s3w8"])), selfAligned(ov2(tcTable["16x64k128s3b3"])),
	selfAligned(ov(tcTable["16x128k64s4b2"])), selfAligned(tcTable["32x128k64s4b2"])}

func selfAligned(c Config) Config {
	c.SA = 1
	return c
}

var emuWGTestConfigs = []Config{wg(1, 64, 3, 1), wg(2, 64, 3, 2), pp(wg(2, 64, 3, 1)),
	tma(wg(1, 64, 3, 1)), tma(wg(2, 64, 3, 2)), tma(pp(wg(2, 64, 3, 1))),
	mc(tma(wg(1, 64, 3, 1))), mc(tma(wg(2, 64, 3, 2))),
	mn(tma(wg(1, 64, 3, 1))), mn(tma(wg(2, 64, 3, 2)))}

func emuConfigs() []Config {
	return append(append(append(append(TCConfigs(), emuTestConfigs...), emuSATestConfigs...), WGConfigs()...), emuWGTestConfigs...)
}

var errNoCXX = errors.New("no C++ compiler (g++) for the kernel emulator")

// emuBinary builds the emulator with the given tc configurations and extra
// defines, once per test binary, or skips saying why.
func emuBinary(t *testing.T, configs []Config, defines ...string) string {
	t.Helper()
	var tcs, wgs []string
	for _, c := range configs {
		switch c.Kernel {
		case "wg":
			wgs = append(wgs, c.wgEntry())
		case "tc":
			tcs = append(tcs, c.tcEntry())
		} // skinny and tiled kernels are built in
	}
	args := []string{"-DMOE_TC_LIST=" + strings.Join(tcs, " ")}
	if len(wgs) > 0 {
		args = append(args, "-DMOE_WG_LIST="+strings.Join(wgs, " "))
	}
	args = append(args, defines...)
	key := strings.Join(args, " ")
	emu.mu.Lock()
	if emu.builds == nil {
		emu.builds = map[string]*emuBuild{}
	}
	b := emu.builds[key]
	if b == nil {
		b = &emuBuild{}
		emu.builds[key] = b
	}
	if emu.dir == "" {
		var err error
		if emu.dir, err = os.MkdirTemp("", "mstar-moe-emu-"); err != nil {
			emu.mu.Unlock()
			t.Fatal(err)
		}
	}
	out := filepath.Join(emu.dir, fmt.Sprintf("emu%d", len(emu.builds)))
	emu.mu.Unlock()
	b.once.Do(func() {
		cxx, err := exec.LookPath("g++")
		if err != nil {
			b.err = fmt.Errorf("%w: %v", errNoCXX, err)
			return
		}
		cmd := exec.Command(cxx, append([]string{"-std=c++20", "-O2", "-U_FORTIFY_SOURCE", "-Wall", "-Wno-unknown-pragmas",
			"-o", out, filepath.Join("emu", "emu_main.cpp")}, args...)...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building the kernel emulator: %v\n%s", err, msg)
			return
		}
		b.bin = out
	})
	if errors.Is(b.err, errNoCXX) {
		t.Skip(b.err.Error())
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// emuRun is one emulated forward pass on the emulator bin: the plan's
// layout with `resident` blocks per tc GEMM, the inputs as SetInputs
// uploads them, the emulator's scheduling and cp.async modes in env. It
// returns out[M,H], or the emulator's complaint.
func emuRun(t *testing.T, bin string, l *Layer, x []float32, r routing.Routing, c Config, resident int, env ...string) ([]float32, error) {
	t.Helper()
	out, _, err := emuRunStats(t, bin, l, x, r, c, resident, env...)
	return out, err
}

// emuRunStats is emuRun that also returns, per buffer, the bytes its
// cp.async copies read.
func emuRunStats(t *testing.T, bin string, l *Layer, x []float32, r routing.Routing, c Config, resident int, env ...string) ([]float32, map[planBuf]int64, error) {
	t.Helper()
	s := l.Shape
	lay := newPlanLayout(s, r.M, c, [2]int{resident, resident})
	dir := t.TempDir()
	xb := make([]uint16, len(x))
	ToBF16(xb, x)
	files := map[planBuf][]byte{
		bufW1: u16bytes(l.W1), bufW2: u16bytes(l.W2), bufX: u16bytes(xb),
		bufIDs: int32bytes(r.IDs), bufWts: float32bytes(r.Weights),
	}
	if n := lay.bytes[bufCombineCount]; n > 0 {
		files[bufCombineCount] = make([]byte, n) // NewPlan zeroes it on the device
	}
	for _, e := range env {
		if e == "EMU_ZERO_ALIGN=1" {
			// The alignment's buffers as fresh device memory often reads
			// (zeros: expert 0, slot 0) instead of the poison: what a kernel
			// leaves unwritten there is then read as real rows.
			for _, b := range []planBuf{bufSorted, bufBlockExpert, bufTotal} {
				files[b] = make([]byte, max(lay.bytes[b], 16))
			}
		}
	}
	var script bytes.Buffer
	for b := bufW1; b < numPlanBufs; b++ {
		if data, ok := files[b]; ok && len(data) > 0 {
			path := filepath.Join(dir, b.String()+".bin")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&script, "buf %d %d %s\n", b, len(data), path)
			continue
		}
		fmt.Fprintf(&script, "buf %d %d\n", b, max(lay.bytes[b], 16))
	}
	one := func(v int) int { return max(v, 1) }
	passes := 1
	for _, e := range env {
		if e == "EMU_PASSES=2" {
			// Two passes, the output poisoned between them: what one pass
			// leaves behind (the fused combine's counts) must not spoil the next.
			passes = 2
		}
	}
	launches := lay.launches
	for p := 1; p < passes; p++ {
		launches = append(launches, launchSpec{kernel: "poison"})
		launches = append(launches, lay.launches...)
	}
	for _, ln := range launches {
		if ln.kernel == "poison" {
			fmt.Fprintf(&script, "poison %d\n", bufOut)
			continue
		}
		fmt.Fprintf(&script, "launch %s %d %d %d %d %d %d %d", ln.kernel, one(ln.grid.X), one(ln.grid.Y), one(ln.grid.Z),
			one(ln.block.X), one(ln.block.Y), one(ln.block.Z), ln.smem)
		if ln.cluster > 1 {
			fmt.Fprintf(&script, " c%d", ln.cluster)
		}
		for _, a := range ln.args {
			switch v := a.(type) {
			case planBuf:
				fmt.Fprintf(&script, " b%d", v)
			case int32:
				fmt.Fprintf(&script, " i%d", v)
			case tensorMapArg:
				fmt.Fprintf(&script, " t%d:%d:%d:%d:%d", v.buf, v.inner, v.rows, v.boxInner, v.boxRows)
			default:
				t.Fatalf("launch %s: argument %T", ln.kernel, a)
			}
		}
		script.WriteString("\n")
	}
	outPath, statsPath := filepath.Join(dir, "out.bin"), filepath.Join(dir, "stats")
	fmt.Fprintf(&script, "save %d %s\nstats %s\n", bufOut, outPath, statsPath)
	scriptPath := filepath.Join(dir, "script")
	if err := os.WriteFile(scriptPath, script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, scriptPath)
	cmd.Env = append(os.Environ(), env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("emulating %v M=%d (%s): %v: %s", c, r.M, strings.Join(env, " "), err, bytes.TrimSpace(msg))
	}
	raw, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, r.M*s.H)
	FromBF16(out, unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), len(raw)/2)[:len(out)])
	statsText, err := os.ReadFile(statsPath)
	if err != nil {
		t.Fatal(err)
	}
	stats := map[planBuf]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(statsText)), "\n") {
		var id int
		var n int64
		if _, err := fmt.Sscan(line, &id, &n); err != nil {
			t.Fatalf("emulator stats line %q: %v", line, err)
		}
		stats[planBuf(id)] = n
	}
	return out, stats, nil
}

func int32bytes(v []int32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

func float32bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// forwardError is the output's rel L2 error against the float64 reference
// on every token, or +Inf when an element is not finite (never written).
func forwardError(l *Layer, x []float32, r routing.Routing, out []float32) (float64, string) {
	for i, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return math.Inf(1), fmt.Sprintf("out[%d] (token %d, column %d) = %v", i, i/l.Shape.H, i%l.Shape.H, v)
		}
	}
	return RelL2(out, Reference(l, x, r)), ""
}

// TestEmulatedKernels runs every kernel family through the emulator on
// shapes with K and N tails, padding rows, dropped slots and experts
// without tokens, under the scheduling and cp.async modes that expose
// missing waits and barriers.
func TestEmulatedKernels(t *testing.T) {
	// gemm1: N = I = 96 (a partial n-tile at 64 outputs), K = H = 128;
	// gemm2: N = 128, K = 96 (a K tail at BK 64).
	small := Shape{E: 4, K: 2, H: 128, I: 96}
	// More k-tiles than stages (the ring wraps), N tails of 8.
	long := Shape{E: 6, K: 2, H: 384, I: 200}
	type row struct {
		name     string
		shape    Shape
		m        int
		c        Config
		ep       int
		resident int
		env      []string
	}
	early, late := []string{"EMU_CP=early", "EMU_SCHED=lowest"}, []string{"EMU_CP=late", "EMU_SCHED=highest"}
	random := []string{"EMU_CP=late", "EMU_SCHED=random:7"}
	rows := []row{
		// The v1–v3 kernels, known correct on the H200: they check the emulator.
		{name: "skinny nt1", shape: small, m: 5, c: Config{Kernel: "skinny", NT: 1}, env: early},
		{name: "skinny nt2 w16", shape: small, m: 9, c: Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16}, env: late},
		{name: "tiled m16", shape: small, m: 40, c: tiledTable["m16"], env: late},
		{name: "tiled w128x128", shape: small, m: 40, c: tiledTable["w128x128"], env: early},
	}
	for _, c := range emuConfigs() {
		if c.Kernel == "wg" {
			// The wgmma reads at issue (EMU_WG=early) with copies landing
			// late, and at the retiring wait (late) with copies landing early.
			rows = append(rows,
				row{name: "wg " + c.wgID() + " early", shape: small, m: 40, c: c, resident: 3, env: append([]string{"EMU_WG=early", "EMU_TMA=late"}, late...)},
				row{name: "wg " + c.wgID() + " late", shape: long, m: 50, c: c, resident: 2, env: append([]string{"EMU_WG=late", "EMU_TMA=early"}, random...)},
			)
			continue
		}
		if c.SA != 0 {
			continue // at most 64 slots: the rows below
		}
		rows = append(rows,
			row{name: "tc " + c.tcID() + " early", shape: small, m: 40, c: c, resident: 3, env: early},
			row{name: "tc " + c.tcID() + " late", shape: long, m: 50, c: c, resident: 2, env: late},
		)
	}
	rows = append(rows,
		row{name: "tc dropped slots ep2", shape: Shape{E: 8, K: 2, H: 128, I: 96}, ep: 2, m: 30, c: tcTable["128x128k32s4b2"], resident: 1, env: random},
		row{name: "tc one block walks every tile", shape: long, m: 33, c: tcTable["64x128k64s4b2"], resident: 1, env: random},
		// ov: the next tile's loads and slot set are written while this
		// tile's epilogue reads its own.
		row{name: "tc ov one block walks every tile", shape: long, m: 33, c: tcTable["64x128k64s4b2ov"], resident: 1, env: random},
		row{name: "tc ov dropped slots ep2", shape: Shape{E: 8, K: 2, H: 128, I: 96}, ep: 2, m: 30, c: tcTable["128x128k32s4b2ov"], resident: 1, env: random},
		// ov2: the stage ring across tiles. With H = 128 and I = 96 every
		// tile is one 128-wide k-stage, so the loads (and their slot sets)
		// run ST-1 tiles ahead of the MMAs; one block walking every tile.
		row{name: "tc ov2 one k-stage a tile", shape: small, m: 40, c: tcTable["16x256k128s3w8ov2"], resident: 1, env: random},
		row{name: "tc ov2 one k-stage a tile, 2 stages", shape: small, m: 40, c: tcTable["16x256k128s2w8ov2"], resident: 1, env: late},
		row{name: "tc ov2 one block walks every tile", shape: long, m: 33, c: tcTable["32x256k64s3ov2"], resident: 1, env: random},
		row{name: "tc ov2 dropped slots ep2", shape: Shape{E: 8, K: 2, H: 128, I: 96}, ep: 2, m: 30, c: tcTable["16x128k64s4b2ov2"], resident: 1, env: random},
		row{name: "tc one token", shape: small, m: 1, c: tcTable["32x128k64s4b2"], resident: 4, env: early},
		row{name: "wg one block walks every tile", shape: long, m: 70, c: wgTable["128x128s4"], resident: 1, env: append([]string{"EMU_WG=late"}, random...)},
		row{name: "wg dropped slots ep2", shape: Shape{E: 8, K: 2, H: 128, I: 96}, ep: 2, m: 30, c: wgTable["64x128s4"], resident: 1, env: append([]string{"EMU_WG=late"}, random...)},
		row{name: "wg one token", shape: small, m: 1, c: wgTable["128x256s4"], resident: 4, env: []string{"EMU_WG=early", "EMU_CP=early"}},
		row{name: "wg pp one block walks every tile", shape: long, m: 70, c: wgTable["64x256s4pp"], resident: 1, env: append([]string{"EMU_WG=late"}, random...)},
		row{name: "wg pp odd tile count", shape: long, m: 9, c: wgTable["64x128s6pp"], resident: 2, env: append([]string{"EMU_WG=early"}, late...)},
		// mc=1: pairs of one expert's m-tiles (the weight tile multicast),
		// pairs across two experts (each block loads its own), one cluster
		// walking every unit, and an odd m-tile count (a block with none).
		row{name: "wg mc shared pairs", shape: Shape{E: 2, K: 2, H: 128, I: 96}, m: 150, c: wgTable["128x256s4mc"], resident: 2, env: append([]string{"EMU_WG=late", "EMU_TMA=late"}, random...)},
		row{name: "wg mc shared and split pairs", shape: Shape{E: 2, K: 2, H: 128, I: 96}, m: 150, c: wgTable["64x256s4mc"], resident: 4, env: append([]string{"EMU_WG=early", "EMU_TMA=early"}, late...)},
		row{name: "wg mc odd m-tile count", shape: Shape{E: 3, K: 2, H: 384, I: 96}, m: 60, c: wgTable["64x256s4mc"], resident: 3, env: append([]string{"EMU_WG=late", "EMU_TMA=late"}, random...)},
		// Past 4096 slots the alignment runs over several blocks (count,
		// scan, scatter); with expert parallelism half the slots are dropped.
		row{name: "multi-block alignment", shape: Shape{E: 8, K: 4, H: 64, I: 32}, m: 1100, c: tcTable["64x128k64s4b2"], resident: 8, env: random},
		// Split configurations: each GEMM its own kernels, gemm2 on its own
		// alignment when the token blocks differ.
		row{name: "split skinny+tc", shape: small, m: 7, c: Split(Config{Kernel: "skinny", NT: 1}, tcTable["32x128k64s3b3"]), resident: 2, env: random},
		row{name: "split tc16+tc32 multi-block", shape: Shape{E: 8, K: 4, H: 64, I: 32}, m: 1100, c: Split(tcTable["16x256k64s4"], tcTable["32x128k64s3b3ov"]), resident: 4, env: random},
		row{name: "split tc+skinny", shape: small, m: 9, c: Split(tcTable["16x128k64s4b2"], Config{Kernel: "skinny", NT: 2}), resident: 3, env: early},
		// The combine fused into gemm2: the last block of each column tile
		// sums the tokens (dropped slots and expert parallelism included).
		row{name: "skinny fc", shape: small, m: 5, c: Config{Kernel: "skinny", NT: 1, FC: 1}, env: random},
		// The alignment fused into gemm1 (≤ 64 slots): every block sorts
		// the slots itself, block (0, 0) writes gemm2's alignment.
		row{name: "skinny sa", shape: small, m: 5, c: Config{Kernel: "skinny", NT: 1, SA: 1}, env: random},
		row{name: "skinny sa fc nt2 two passes", shape: small, m: 9, c: Config{Kernel: "skinny", NT: 2, SA: 1, FC: 1}, env: append([]string{"EMU_PASSES=2"}, random...)},
		row{name: "skinny sa w16 dropped slots ep2", shape: Shape{E: 8, K: 2, H: 128, I: 96}, ep: 2, m: 30, c: Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16, SA: 1}, env: late},
		row{name: "split skinny sa+tc32", shape: small, m: 7, c: Split(Config{Kernel: "skinny", NT: 1, SA: 1}, tcTable["32x128k64s3b3"]), resident: 2, env: random},
		row{name: "skinny fc two passes", shape: small, m: 5, c: Config{Kernel: "skinny", NT: 2, FC: 1}, env: append([]string{"EMU_PASSES=2"}, random...)},
		row{name: "skinny fc w16 nt1", shape: long, m: 3, c: Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16, FC: 1}, env: late},
		row{name: "skinny fc nt4 ep2", shape: Shape{E: 8, K: 2, H: 128, I: 96}, ep: 2, m: 30, c: Config{Kernel: "skinny", NT: 4, FC: 1}, env: random},
		row{name: "split tc16+skinny fc", shape: small, m: 9, c: Split(tcTable["16x256k128s3w8ov"], Config{Kernel: "skinny", NT: 1, FC: 1}), resident: 2, env: early},
		row{name: "multi-block alignment ep2", shape: Shape{E: 16, K: 4, H: 64, I: 32}, ep: 2, m: 2100, c: Config{Kernel: "skinny", NT: 1}, env: random},
		// The alignment fused into a tc gemm1 (sa=1, at most 64 slots): every
		// block sorts the slots into shared memory and walks its tiles from
		// there, block 0 writes gemm2's alignment. 64 slots (the most), one
		// block walking every tile, dropped slots, two passes, and gemm2 of
		// another kernel reading block 0's alignment (skinny's grid covers
		// every possible tile, so block_expert must say -1 past the end) from
		// buffers that start as zeros.
		row{name: "tc sa ov2 64 slots", shape: long, m: 32, c: emuSATestConfigs[0], resident: 3, env: random},
		row{name: "tc sa ov2 4 warps one block walks every tile", shape: long, m: 20, c: emuSATestConfigs[1], resident: 1, env: late},
		row{name: "tc sa ov dropped slots ep2", shape: Shape{E: 8, K: 2, H: 128, I: 96}, ep: 2, m: 30, c: emuSATestConfigs[2], resident: 2, env: random},
		row{name: "tc sa 32-row two passes", shape: small, m: 9, c: emuSATestConfigs[3], resident: 2, env: append([]string{"EMU_PASSES=2"}, random...)},
		row{name: "tc sa one token", shape: small, m: 1, c: emuSATestConfigs[0], resident: 4, env: early},
		row{name: "split tc sa+skinny zeroed alignment", shape: small, m: 9, c: Split(emuSATestConfigs[0], Config{Kernel: "skinny", NT: 2, FC: 1}), resident: 2, env: append([]string{"EMU_ZERO_ALIGN=1"}, random...)},
		row{name: "split tc16 sa+tc32", shape: long, m: 20, c: Split(emuSATestConfigs[2], tcTable["32x128k64s3b3ov"]), resident: 2, env: append([]string{"EMU_ZERO_ALIGN=1"}, late...)},
		// gv=1, the dot-product decode GEMMs: one token an expert and
		// groups of 2–8 (each token-count instance), K past one step of
		// 8 loads a lane with a tail (deep: gemm1 K = 2304, gemm2 N = 2304
		// in 72 blocks of 32 features, gemm1 N = 40 in 10 of 4), fused
		// alignment and combine, two passes, dropped slots, and halves of
		// split configurations on their own alignment.
		row{name: "skinny gv", shape: small, m: 5, c: Config{Kernel: "skinny", NT: 1, GV: 1}, env: early},
		row{name: "skinny gv one token", shape: small, m: 1, c: Config{Kernel: "skinny", NT: 1, GV: 1, SA: 1, FC: 1}, env: late},
		row{name: "skinny gv sa fc two passes", shape: small, m: 9, c: Config{Kernel: "skinny", NT: 1, GV: 1, SA: 1, FC: 1}, env: append([]string{"EMU_PASSES=2"}, random...)},
		row{name: "skinny gv sa dropped slots ep2", shape: Shape{E: 8, K: 2, H: 128, I: 96}, ep: 2, m: 30, c: Config{Kernel: "skinny", NT: 1, GV: 1, SA: 1}, env: late},
		row{name: "skinny gv fc deep", shape: Shape{E: 4, K: 2, H: 2304, I: 40}, m: 3, c: Config{Kernel: "skinny", NT: 1, GV: 1, FC: 1}, env: random},
		row{name: "split skinny gv sa+skinny w16 fc", shape: long, m: 5, c: Split(Config{Kernel: "skinny", NT: 1, GV: 1, SA: 1}, Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16, FC: 1}), env: random},
		row{name: "split tc16 sa+skinny gv fc zeroed alignment", shape: small, m: 9, c: Split(emuSATestConfigs[0], Config{Kernel: "skinny", NT: 1, GV: 1, FC: 1}), resident: 2, env: append([]string{"EMU_ZERO_ALIGN=1"}, random...)},
	)
	for _, tt := range rows {
		t.Run(tt.name, func(t *testing.T) {
			if testing.Short() && strings.HasSuffix(tt.name, " late") {
				t.Skip("-short: the early-mode rows only")
			}
			bin := emuBinary(t, emuConfigs())
			t.Parallel()
			ep := max(tt.ep, 1)
			local := tt.shape
			local.E /= ep
			l := NewLayer(local, 31)
			x := RandomInput(tt.m, local.H, 32)
			r := UniformRouting(tt.m, tt.shape.E, tt.shape.K, 33).Localize(tt.shape.E, ep, 0)
			out, err := emuRun(t, bin, l, x, r, tt.c, max(tt.resident, 1), tt.env...)
			if err != nil {
				t.Fatal(err)
			}
			e, bad := forwardError(l, x, r, out)
			if bad != "" {
				t.Fatalf("%s: never written or not finite", bad)
			}
			if !(e <= 1e-2) {
				t.Errorf("rel L2 error %g > 1e-2 against the float64 reference", e)
			}
			t.Logf("%v M=%d: rel L2 %.3g", tt.c, tt.m, e)
		})
	}
}

// TestEmulatorCatchesBugs runs the tc kernels on emulators whose
// __syncthreads or cp.async.wait_group do nothing — a kernel missing its
// barriers or waits — and requires every run to fail (an error, an element
// never written, or a wrong result): a pass of TestEmulatedKernels means
// something only if these fail.
func TestEmulatorCatchesBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds two more emulators")
	}
	s := Shape{E: 4, K: 2, H: 384, I: 96}
	l := NewLayer(s, 41)
	x := RandomInput(40, s.H, 42)
	r := UniformRouting(40, s.E, s.K, 43)
	tcs := []Config{tcTable["128x128k64s4"], tcTable["64x128k64s4b2"], tcTable["64x128k64s4b2ov"], tcTable["32x256k64s3ov2"]}
	ov2s := []Config{tcTable["16x256k128s3w8ov2"], tcTable["32x256k128s3w8ov2"]}
	wgs := []Config{wgTable["128x256s4"], wgTable["64x128s4"], wgTable["64x256s4pp"]}
	tmas := []Config{wgTable["128x256s4tma"], wgTable["64x256s4pptma"]}
	mcs := []Config{wgTable["128x256s4mc"], wgTable["64x256s4mc"]}
	mns := []Config{mn(tma(wg(2, 64, 3, 2))), mn(tma(wg(1, 64, 3, 1)))}
	// gemm2 tiles tokens in 16s too (skinny nt=2), so it reads gemm1's alignment.
	sas := []Config{emuSATestConfigs[0], emuSATestConfigs[3], Split(emuSATestConfigs[2], Config{Kernel: "skinny", NT: 2, FC: 1})}
	gvs := []Config{{Kernel: "skinny", NT: 1, GV: 1}, {Kernel: "skinny", NT: 1, GV: 1, FC: 1}}
	// Two experts of 200 slots: every cluster's two m-tiles are one
	// expert's, so each weight tile is multicast.
	s2 := Shape{E: 2, K: 2, H: 384, I: 96}
	short := Shape{E: 4, K: 2, H: 128, I: 96}
	shared := &emuData{NewLayer(s2, 51), RandomInput(200, s2.H, 52), UniformRouting(200, s2.E, s2.K, 53)}
	tests := []struct {
		name, define string
		env          []string
		configs      []Config
		data         *emuData // nil: the 40 tokens above
	}{
		{"waits one cp.async group short, copies land late", "-DEMU_BUG_WAIT_ONE_LESS", []string{"EMU_CP=late", "EMU_SCHED=random:3"}, tcs, nil},
		{"no __syncthreads, warps drift, copies land early", "-DEMU_BUG_NO_SYNC", []string{"EMU_CP=early", "EMU_SCHED=lowest"}, tcs, nil},
		{"no __syncthreads, warps drift backwards", "-DEMU_BUG_NO_SYNC", []string{"EMU_CP=early", "EMU_SCHED=highest"}, tcs, nil},
		// tc ov=2: two slot sets where the loads run up to ST tiles ahead
		// (H = 128: one k-stage a tile; 200 tokens: each of the 2 blocks
		// walks 8 or more tiles), so a set is rewritten before its tile's
		// epilogue reads it.
		{"tc ov2: two slot sets for loads tiles ahead", "-DEMU_BUG_OV2_TWO_SETS", []string{"EMU_CP=early", "EMU_SCHED=lowest"}, ov2s, &emuData{NewLayer(short, 61), RandomInput(200, short.H, 62), UniformRouting(200, short.E, short.K, 63)}},
		// tc with one gate and one up n-tile a warp (16×64 tiles of 4
		// warps): the up fragment loaded from the next gate rows.
		{"tc: a warp's up rows taken from the gate half", "-DEMU_BUG_TC_GATE_PAIR", []string{"EMU_CP=early", "EMU_SCHED=lowest"},
			[]Config{tcTable["16x64k128s4b2"], ov2(tcTable["16x64k128s3b3"])}, nil},
		// wg: a stage reported full one cp.async group early, read at issue.
		{"wg: producer waits one cp.async group short", "-DEMU_BUG_WAIT_ONE_LESS", []string{"EMU_CP=late", "EMU_WG=early", "EMU_SCHED=random:3"}, wgs, nil},
		// wg: a stage handed back while its MMAs are in flight, read at retirement.
		{"wg: consumers retire one wgmma group short", "-DEMU_BUG_WG_WAIT_ONE_LESS", []string{"EMU_CP=early", "EMU_WG=late", "EMU_SCHED=random:5"}, wgs, nil},
		// wg: the producer's next unit fetched from the unit it is on (each
		// block walks several units), and the epilogue's slots never loaded
		// (nothing stored: the poisoned output shows).
		// (The 128-row producer without TMA fetches each unit as it starts.)
		{"wg: next unit's slots fetched from the current unit", "-DEMU_BUG_WG_FETCH_SAME", []string{"EMU_CP=early", "EMU_WG=early", "EMU_SCHED=lowest"}, append(append([]Config{}, wgs[1:]...), tmas...), nil},
		{"wg: epilogue slots not loaded", "-DEMU_BUG_WG_EPILOGUE_STALE", []string{"EMU_CP=early", "EMU_WG=early", "EMU_SCHED=lowest"}, wgs, nil},
		// wg: the epilogue's quad transpose stopped after its first stage
		// (lanes store columns of their pair's rows).
		{"wg: epilogue transpose half done", "-DEMU_BUG_QUAD_ONE_STAGE", []string{"EMU_CP=early", "EMU_WG=early", "EMU_SCHED=lowest"}, wgs, nil},
		// wg tma=1: the weight bytes not announced on the "full" barrier, so
		// the stage reads as full before its tile lands.
		{"wg tma: no expect_tx, tiles land late", "-DEMU_BUG_TMA_NO_EXPECT", []string{"EMU_CP=early", "EMU_WG=early", "EMU_TMA=late", "EMU_SCHED=random:3"}, tmas, nil},
		// wg tma=1: the up half loaded from the gate rows.
		{"wg tma: gemm1's up box at the gate rows", "-DEMU_BUG_TMA_UP_AT_GATE", []string{"EMU_CP=early", "EMU_WG=early", "EMU_SCHED=lowest"}, tmas, nil},
		// wg mc=1: the half multicast to its own block only (the peer's
		// stage never fills), a stage handed back to this block's producer
		// only (the peer's never empties), and a weight tile shared between
		// two experts' m-tiles (here each of the 4 experts has one).
		{"wg mc: multicast to the own block only", "-DEMU_BUG_MC_OWN_ONLY", []string{"EMU_CP=early", "EMU_WG=early", "EMU_SCHED=random:3"}, mcs, shared},
		{"wg mc: stage handed back to one producer", "-DEMU_BUG_MC_NO_PEER_RELEASE", []string{"EMU_CP=early", "EMU_WG=early", "EMU_SCHED=random:4"}, mcs, shared},
		{"wg mc: weight tile shared across experts", "-DEMU_BUG_MC_SHARE_ALWAYS", []string{"EMU_CP=early", "EMU_WG=early", "EMU_SCHED=lowest"}, mcs, nil},
		// wg mc=2: the half never sent to the peer (its stage never fills),
		// the "full" barrier not told of the peer's half (the stage reads as
		// full before it lands), and the half sent before this block's
		// copies of it have landed (the peer gets stale rows).
		{"wg mc=2: half not forwarded", "-DEMU_BUG_MN_NO_FORWARD", []string{"EMU_CP=early", "EMU_WG=early", "EMU_SCHED=random:3"}, mns, nil},
		{"wg mc=2: peer's half not expected", "-DEMU_BUG_MN_NO_EXPECT", []string{"EMU_CP=early", "EMU_WG=early", "EMU_TMA=late", "EMU_SCHED=random:5"}, mns, nil},
		{"wg mc=2: half sent before it landed", "-DEMU_BUG_MN_NO_GATHER_WAIT", []string{"EMU_CP=late", "EMU_WG=early", "EMU_TMA=early", "EMU_SCHED=random:7"}, mns, nil},
		// tc sa=1: padding rows never set to the pad slot (they keep what
		// shared memory held: zeros, slot 0); block 0 not writing gemm2's
		// alignment (the buffers start as zeros, as fresh device memory).
		{"tc sa: padding rows not padded", "-DEMU_BUG_TC_SA_NO_PAD", []string{"EMU_CP=early", "EMU_SCHED=lowest"}, sas, &emuData{NewLayer(short, 71), RandomInput(9, short.H, 72), UniformRouting(9, short.E, short.K, 73)}},
		// gv=1: every group's first token only (the 40 tokens give each
		// expert groups of 8), and no barriers (gemm1's gate and up halves
		// paired through shared memory, the group's slots read before
		// thread 0 wrote them).
		{"gv: first token of a group only", "-DEMU_BUG_GV_ONE_TOKEN", []string{"EMU_SCHED=lowest"}, gvs, nil},
		{"gv: no __syncthreads, warps drift backwards", "-DEMU_BUG_NO_SYNC", []string{"EMU_SCHED=highest"}, gvs, nil},
		{"tc sa: no alignment for gemm2", "-DEMU_BUG_TC_SA_NO_HANDOFF", []string{"EMU_CP=early", "EMU_SCHED=random:3", "EMU_ZERO_ALIGN=1"}, sas, &emuData{NewLayer(short, 71), RandomInput(9, short.H, 72), UniformRouting(9, short.E, short.K, 73)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			configs := tt.configs
			bin := emuBinary(t, configs, tt.define)
			t.Parallel()
			d := emuData{l, x, r}
			if tt.data != nil {
				d = *tt.data
			}
			for _, c := range configs {
				out, err := emuRun(t, bin, d.l, d.x, d.r, c, 2, tt.env...)
				if err != nil {
					t.Logf("%v: fails as it should: %v", c, err)
					continue
				}
				e, bad := forwardError(d.l, d.x, d.r, out)
				if bad == "" && e <= 1e-2 {
					t.Errorf("%v passes (rel L2 %.3g) on an emulator with %s: the emulator would not catch that bug", c, e, tt.define)
				} else {
					t.Logf("%v: fails as it should: rel L2 %.3g %s", c, e, bad)
				}
			}
		})
	}
}

// emuData is a layer, its input and its routing.
type emuData struct {
	l *Layer
	x []float32
	r routing.Routing
}

func TestPlanLayout(t *testing.T) {
	s := Shape{E: 8, K: 2, H: 256, I: 200}
	tests := []struct {
		name         string
		c            Config
		m            int
		resident     [2]int
		grid1, grid2 cuda.Dim3
	}{
		{"skinny covers every 16-row tile", Config{Kernel: "skinny", NT: 1}, 3, [2]int{}, cuda.Dim3{X: 13, Y: 6}, cuda.Dim3{X: 16, Y: 6}},
		{"tiled covers every tile", tiledTable["m64"], 100, [2]int{}, cuda.Dim3{X: 4, Y: 11}, cuda.Dim3{X: 2, Y: 11}},
		// 20000 slots: up to 165 tiles of 128 rows, × 4 and × 2 n-tiles.
		{"tc is persistent", tcTable["128x128k64s4"], 10000, [2]int{132, 264}, cuda.Dim3{X: 132}, cuda.Dim3{X: 264}},
		// 20 slots: up to 9 tiles (8 experts' padding).
		{"tc never more blocks than tiles", tcTable["128x128k64s4"], 10, [2]int{132, 264}, cuda.Dim3{X: 9 * 4}, cuda.Dim3{X: 9 * 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newPlanLayout(s, tt.m, tt.c, tt.resident)
			// The alignment is one launch up to 4096 slots, three beyond.
			wantAlign := 1
			if tt.m*s.K > 2*alignChunk {
				wantAlign = 3
			}
			if len(l.launches) != wantAlign+3 {
				t.Fatalf("%d launches, want %d", len(l.launches), wantAlign+3)
			}
			l.launches = l.launches[wantAlign-1:] // gemm1 at 1, gemm2 at 2
			if g := l.launches[1].grid; g != tt.grid1 {
				t.Errorf("gemm1 grid %+v, want %+v", g, tt.grid1)
			}
			if g := l.launches[2].grid; g != tt.grid2 {
				t.Errorf("gemm2 grid %+v, want %+v", g, tt.grid2)
			}
			if got, want := l.launches[1].smem, tt.c.SharedBytes(); got != want {
				t.Errorf("gemm1 shared memory %d, want %d", got, want)
			}
			g1, g2 := tt.c.kernelNames()
			if l.launches[1].kernel != g1 || l.launches[2].kernel != g2 {
				t.Errorf("kernels %s, %s; want %s, %s", l.launches[1].kernel, l.launches[2].kernel, g1, g2)
			}
			var sum int64
			for b := bufX; b < numPlanBufs; b++ {
				sum += l.bytes[b]
			}
			if PlanBytes(s, tt.m, tt.c) != sum {
				t.Errorf("PlanBytes %d, want the layout's %d", PlanBytes(s, tt.m, tt.c), sum)
			}
		})
	}
}

// A split configuration whose GEMMs tile tokens in blocks of different
// sizes aligns twice; gemm2 reads its own alignment. Same blocks: once.
func TestPlanLayoutSplit(t *testing.T) {
	s := Shape{E: 8, K: 2, H: 256, I: 200}
	for _, tt := range []struct {
		name   string
		c      Config
		m      int
		aligns int // alignment launches
	}{
		{"blocks 8 and 32", Split(Config{Kernel: "skinny", NT: 1}, tcTable["32x128k64s3b3"]), 20, 2},
		{"blocks 16 and 16", Split(tcTable["16x256k128s3w8"], tcTable["16x128k64s4b2"]), 20, 1},
		{"multi-block, blocks 16 and 32", Split(tcTable["16x256k64s4"], tcTable["32x256k64s3"]), 3000, 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newPlanLayout(s, tt.m, tt.c, [2]int{132, 132})
			if len(l.launches) != tt.aligns+3 {
				t.Fatalf("%d launches, want %d alignments + 3", len(l.launches), tt.aligns)
			}
			g1, g2, comb := l.launches[tt.aligns], l.launches[tt.aligns+1], l.launches[tt.aligns+2]
			w1, _ := tt.c.Gemm(1).kernelNames()
			_, w2 := tt.c.Gemm(2).kernelNames()
			if g1.kernel != w1 || g2.kernel != w2 || comb.kernel != "moe_combine" || g1.gemm != 1 || g2.gemm != 2 {
				t.Fatalf("launches %s (%d), %s (%d), %s; want %s, %s, moe_combine", g1.kernel, g1.gemm, g2.kernel, g2.gemm, comb.kernel, w1, w2)
			}
			if g2.smem != tt.c.Gemm(2).SharedBytes() || g2.block.X != tt.c.Gemm(2).Threads(2) {
				t.Errorf("gemm2 launch %d bytes, %d threads; want its own config's %d, %d", g2.smem, g2.block.X, tt.c.Gemm(2).SharedBytes(), tt.c.Gemm(2).Threads(2))
			}
			own := tt.c.Gemm(1).Block() != tt.c.Gemm(2).Block()
			wantSorted := bufSorted
			if own {
				wantSorted = bufSorted2
			}
			if g2.args[4] != wantSorted || g1.args[4] != bufSorted {
				t.Errorf("gemm1 reads %v, gemm2 %v; want sorted, %v", g1.args[4], g2.args[4], wantSorted)
			}
			if own != (l.bytes[bufSorted2] > 0) {
				t.Errorf("second alignment buffers %d bytes with own alignment %v", l.bytes[bufSorted2], own)
			}
		})
	}
}

// The fused stages leave their launches out: a self-aligning gemm1 has no
// alignment before it (unless gemm2 tiles tokens in other blocks), a
// fused-combine gemm2 no combine after it.
func TestPlanLayoutFused(t *testing.T) {
	s := Shape{E: 8, K: 2, H: 256, I: 200}
	names := func(l planLayout) string {
		var n []string
		for _, ln := range l.launches {
			n = append(n, ln.kernel)
		}
		return strings.Join(n, " ")
	}
	for _, tt := range []struct {
		c    Config
		want string
	}{
		{Config{Kernel: "skinny", NT: 1, SA: 1, FC: 1}, "moe_gemm1_skinny_nt1_w4_sa moe_gemm2_skinny_nt1_w4_fc"},
		{Config{Kernel: "skinny", NT: 1, SA: 1}, "moe_gemm1_skinny_nt1_w4_sa moe_gemm2_skinny_nt1_w4 moe_combine"},
		{Config{Kernel: "skinny", NT: 1, FC: 1}, "moe_align moe_gemm1_skinny_nt1_w4 moe_gemm2_skinny_nt1_w4_fc"},
		{Split(Config{Kernel: "skinny", NT: 1, SA: 1}, tcTable["32x128k64s3b3"]), "moe_align moe_gemm1_skinny_nt1_w4_sa moe_gemm2_tc_32_128_64_1_4_3_8_3 moe_combine"},
		{selfAligned(tcTable["16x128k64s4b2ov2"]), "moe_gemm1_tc_16_128_64_1_4_4_8_2_ov2_sa moe_gemm2_tc_16_128_64_1_4_4_8_2_ov2_sa moe_combine"},
		{Split(selfAligned(tcTable["16x128k64s4b2ov2"]), tcTable["32x128k64s3b3"]), "moe_align moe_gemm1_tc_16_128_64_1_4_4_8_2_ov2_sa moe_gemm2_tc_32_128_64_1_4_3_8_3 moe_combine"},
	} {
		if got := names(newPlanLayout(s, 20, tt.c, [2]int{132, 132})); got != tt.want {
			t.Errorf("%v: launches %s, want %s", tt.c, got, tt.want)
		}
	}
	for _, c := range []Config{{Kernel: "skinny", NT: 1, SA: 1}, selfAligned(tcTable["16x256k128s3w8"])} {
		if err := CheckConfigShape(c, s, 33); err == nil {
			t.Errorf("%v: a self-aligning gemm1 over 66 slots was accepted", c)
		}
		if err := CheckConfigShape(c, s, 32); err != nil {
			t.Errorf("%v over 64 slots: %v", c, err)
		}
	}
	// The tc gemm1 gets the routing as its last argument, as skinny's does.
	l := newPlanLayout(s, 20, selfAligned(tcTable["16x128k64s4b2ov2"]), [2]int{132, 132})
	if args := l.launches[0].args; args[len(args)-1] != bufIDs {
		t.Errorf("self-aligning tc gemm1's arguments %v: want ids last", args)
	}
}

// A tma=1 wg GEMM gets its weights' tensor map as its last argument:
// gemm1's in boxes of half a tile's columns (gate and up apart), gemm2's
// in whole tiles; a plain wg GEMM gets none.
func TestPlanLayoutTensorMaps(t *testing.T) {
	s := Shape{E: 8, K: 2, H: 256, I: 200}
	l := newPlanLayout(s, 1000, wgTable["128x256s4tma"], [2]int{132, 132})
	g1, g2 := l.launches[len(l.launches)-3], l.launches[len(l.launches)-2]
	want1 := tensorMapArg{buf: bufW1, inner: 256, rows: 8 * 2 * 200, boxInner: 64, boxRows: 128}
	want2 := tensorMapArg{buf: bufW2, inner: 200, rows: 8 * 256, boxInner: 64, boxRows: 256}
	if got := g1.args[len(g1.args)-1]; got != want1 {
		t.Errorf("gemm1's last argument %+v, want %+v", got, want1)
	}
	if got := g2.args[len(g2.args)-1]; got != want2 {
		t.Errorf("gemm2's last argument %+v, want %+v", got, want2)
	}
	// mc=1: gemm2's tile as two boxes of BN/2 rows, clusters of two, even grids.
	mcl := newPlanLayout(s, 1000, wgTable["128x256s4mc"], [2]int{131, 131})
	m1, m2 := mcl.launches[len(mcl.launches)-3], mcl.launches[len(mcl.launches)-2]
	if got := m2.args[len(m2.args)-1].(tensorMapArg); got.boxRows != 128 {
		t.Errorf("mc gemm2's tensor map boxes of %d rows, want 128", got.boxRows)
	}
	for _, ln := range []launchSpec{m1, m2} {
		if ln.cluster != 2 || ln.grid.X%2 != 0 {
			t.Errorf("mc %s: cluster %d, grid %d: want clusters of 2 and an even grid", ln.kernel, ln.cluster, ln.grid.X)
		}
	}
	if g1.cluster != 0 || g2.cluster != 0 {
		t.Errorf("tma without mc: clusters %d, %d", g1.cluster, g2.cluster)
	}
	plain := newPlanLayout(s, 1000, wgTable["128x256s4"], [2]int{132, 132})
	for _, ln := range plain.launches {
		for _, a := range ln.args {
			if _, ok := a.(tensorMapArg); ok {
				t.Errorf("%s of a plain wg configuration has a tensor map", ln.kernel)
			}
		}
	}
	c, err := ParseConfig("wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1")
	if err != nil || c != wgTable["64x256s4pptma"] || c.String() != "wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1" {
		t.Errorf("parse: %v, %v", c, err)
	}
	if c, err := ParseConfig("wg:nc=2,bn=256,stages=4,gm=8,tma=1,mc=1"); err != nil || c != wgTable["128x256s4mc"] || c.wgID() != "2_256_4_8_tma_mc" {
		t.Errorf("mc=1 parse: %v, %v", c, err)
	}
	for _, bad := range []string{"wg:nc=2,bn=256,stages=4,gm=8,mc=1", "wg:nc=2,bn=256,stages=4,gm=8,pp=1,tma=1,mc=1"} {
		if c, err := ParseConfig(bad); err == nil {
			if err = c.Validate(); err == nil {
				t.Errorf("%s (mc=1 without tma=1, or with pp=1) validated", bad)
			}
		}
	}
	if _, err := ParseConfig("tc:bm=16,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,tma=1"); err == nil {
		t.Error("tma=1 on a tc configuration parsed")
	}
	if err := CheckConfigShape(c, Shape{E: 8, K: 2, H: 260, I: 200}, 100); err == nil {
		t.Error("tma=1 with a hidden size of 260 (a 520-byte row) passed the shape check")
	}
}

// The tc and wg kernels fetch the token rows of real slots only: a padding
// row of a tile is zero-filled, not read (v21, v22). What the emulated
// cp.async copies read from x (gemm1's rows) and from the intermediate
// (gemm2's) is exactly slots × n-tiles × row bytes, with tiles over ~7
// slots an expert (mostly padding), dropped slots, and in 16- and 64-row tc
// tiles (with the prologue overlap) and cooperative, ping-pong, tensor-map
// and multicast wg tiles.
func TestEmulatedReadsOnlyLiveRows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the emulated forward rows only")
	}
	bin := emuBinary(t, emuConfigs())
	s := Shape{E: 4, K: 2, H: 128, I: 96}
	const m = 50
	l := NewLayer(s, 51)
	x := RandomInput(m, s.H, 52)
	r := UniformRouting(m, 2*s.E, s.K, 53).Localize(2*s.E, 2, 0) // half the slots on another rank
	slots := int64(0)
	for i := range r.IDs {
		if r.Live(i) {
			slots++
		}
	}
	if slots == 0 || slots == int64(m*s.K) {
		t.Fatalf("%d live slots of %d: want some dropped", slots, m*s.K)
	}
	for _, c := range []Config{tcTable["16x256k128s3w8"], tcTable["16x256k128s3w8ov"], tcTable["64x128k64s4b2"], tcTable["32x128k64s3b3ov"],
		wgTable["128x256s4"], wgTable["128x256s4tma"], wgTable["64x256s4pptma"], wgTable["128x256s4mc"]} {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			out, read, err := emuRunStats(t, bin, l, x, r, c, 2)
			if err != nil {
				t.Fatal(err)
			}
			if e, bad := forwardError(l, x, r, out); bad != "" || !(e <= 1e-2) {
				t.Fatalf("rel L2 %g %s", e, bad)
			}
			n1 := int64((s.I + c.BN/2 - 1) / (c.BN / 2)) // gemm1's n-tiles (gate and up halves)
			n2 := int64((s.H + c.BN - 1) / c.BN)
			if want := slots * n1 * int64(s.H) * 2; read[bufX] != want {
				t.Errorf("gemm1 read %d bytes of token rows, want %d (%d live slots × %d n-tiles × %d)", read[bufX], want, slots, n1, 2*s.H)
			}
			if want := slots * n2 * int64(s.I) * 2; read[bufAct] != want {
				t.Errorf("gemm2 read %d bytes of intermediate rows, want %d (%d live slots × %d n-tiles × %d)", read[bufAct], want, slots, n2, 2*s.I)
			}
		})
	}
}
