package spill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/spill/regulator"
	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

// The peer tier's holder is this test binary, re-executed.
func TestMain(m *testing.M) {
	tier.ServeIfTestHolder()
	os.Exit(m.Run())
}

// small is a quick configuration: tiny pools, one timed sample, a fast
// regulator tick.
func small(t *testing.T) Config {
	return Config{Dev: gpu.NewCPU(), ShmDir: t.TempDir(), Blocks: 8, Samples: 1,
		Interval: 3 * time.Millisecond, TTL: 10 * time.Millisecond,
		Holder: tier.TestBinaryHolder()}
}

// timing gates depend on the machine's load; unit tests never require them
// to pass (the spill-matrix command does).
func timingGate(name string) bool {
	return strings.HasPrefix(name, GBandwidth+".") || name == "cost-model" || name == "tick-cost"
}

func run(t *testing.T, cfg Config, pattern string, size int64) *Matrix {
	t.Helper()
	cells, err := Match(Cells(Scenarios, tier.Kinds, []int64{size}), pattern)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Run(context.Background(), cfg, cells, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Every cell on every tier runs, and every gate that does not time anything
// passes: identical, reached, stranded, unmeasured and the scenario gates.
func TestEveryCellCorrect(t *testing.T) {
	size := int64(2 << 20)
	m := run(t, small(t), "", size)
	want := len(Cells(Scenarios, tier.Kinds, []int64{size}))
	if len(m.Outcomes) != want {
		t.Fatalf("%d outcomes, want %d cells", len(m.Outcomes), want)
	}
	seen := map[string]bool{}
	for _, o := range m.Outcomes {
		if o.Err != nil {
			t.Errorf("%s: %v", o.Cell.Name(), o.Err)
			continue
		}
		if len(o.Results) == 0 {
			t.Errorf("%s: no results", o.Cell.Name())
		}
		for _, r := range o.Results {
			for _, g := range r.Gates {
				seen[g.Name] = true
				switch {
				case !g.Pass && timingGate(g.Name):
					t.Logf("%s: timing gate %s failed (not required here): %s", o.Cell.Name(), g.Name, g.Reason)
				case !g.Pass:
					t.Errorf("%s: %s: %s", o.Cell.Name(), g.Name, g.Reason)
				case g.Reason == "":
					t.Errorf("%s: gate %s passed without saying what it checked", o.Cell.Name(), g.Name)
				}
			}
		}
	}
	for _, g := range []string{GIdentical, GReached, GStranded, GUnmeasured, GBandwidth + ".spill", GBandwidth + ".restore",
		"overwritten", "compute-gated", "short-caught", "cost-model", "interleaved", "cooldown", "tick-cost", "settled",
		"abort-stranded", "ttl", "device-intact", "cold-reports", "growth-measured", "no-hole", "refusal", "floor", "stranded-resolved"} {
		if !seen[g] {
			t.Errorf("no cell checked gate %s", g)
		}
	}
	// One ceiling per tier at the pool's size, plus one per size that the
	// partial cells move (their 25/50/75% shares are held to their own size).
	perTier := map[tier.Kind]int{}
	for _, c := range m.Ceilings {
		perTier[c.Tier]++
	}
	if len(perTier) != len(tier.Kinds) {
		t.Errorf("ceilings of %d tiers measured, want all %d", len(perTier), len(tier.Kinds))
	}
	for _, c := range m.Ceilings {
		if c.Unmeasured != "" || len(c.Spill) == 0 || len(c.Restore) == 0 {
			t.Errorf("ceiling %s: %+v", c.Tier, c)
		}
	}
}

// Each gate fails on purpose, through a fault (as --inject does) or a
// mutation of the cell's own logic, and says why.
func TestGatesFailOnPurpose(t *testing.T) {
	tests := []struct {
		name   string
		cells  string
		faults tier.Faults
		mut    mutations
		tol    float64
		gate   string
		reason string
	}{
		{"corrupt restore", "hibernate/pageable", tier.Faults{Corrupt: true}, mutations{}, 0, GIdentical, "differ after restore"},
		{"corrupt peer restore", "hibernate/peer", tier.Faults{Corrupt: true}, mutations{}, 0, GIdentical, "differ after restore"},
		{"short restore", "hibernate/file", tier.Faults{ShortRestore: 4096}, mutations{}, 0, GReached, "measured by read-back"},
		{"short restore, restore gate", "restore-gate/device", tier.Faults{ShortRestore: 4096}, mutations{}, 0, GReached, "reached"},
		{"stalled copies", "hibernate/pinned", tier.Faults{Stall: 20 * time.Millisecond}, mutations{}, 0, GBandwidth + ".spill", "below the floor"},
		{"stalled ladder", "ladder/pageable", tier.Faults{Stall: 20 * time.Millisecond}, mutations{}, 0, "tick-cost", "cost more than"},
		// Calibrated as on a loaded machine, the interval stretches past the
		// 20 ms stall, one block a tick: the stall must stretch with it.
		{"stalled ladder, slow calibration", "ladder/pageable", tier.Faults{Stall: 20 * time.Millisecond}, mutations{slowCalibration: true}, 0, "tick-cost", "cost more than"},
		{"tenant does not overwrite", "partial/pageable", tier.Faults{}, mutations{tenantNoWrite: true}, 0, "overwritten", "proves nothing"},
		{"compute on unverified bytes", "restore-gate/pageable", tier.Faults{}, mutations{computeUnverified: true}, 0, "short-caught", "compute started"},
		{"requested bytes quoted", "restore-gate/pageable", tier.Faults{}, mutations{quoteRequested: true}, 0, "short-caught", "a read-back measures"},
		{"cost model", "ping-pong/pageable", tier.Faults{}, mutations{}, 1e-12, "cost-model", "error"},
		{"sessions one after another", "multi-session/pageable", tier.Faults{}, mutations{serialSessions: true}, 0, "interleaved", "one after another"},
		{"demand never falls", "ladder/file", tier.Faults{}, mutations{truncateCurves: true}, 0, "settled", "still spilled"},
		{"no cooldown", "ladder/pageable", tier.Faults{}, mutations{noCooldown: true}, 0, "cooldown", "inside one cooldown"},
		{"stranded bytes not reported", "abort/pageable", tier.Faults{}, mutations{strandNothing: true}, 0, "abort-stranded", "reported as 0"},
		{"stranded bytes left at the end", "abort/pinned", tier.Faults{}, mutations{strandNothing: true}, 0, GStranded, "still holds"},
		{"reclaim before the TTL", "abort/pageable", tier.Faults{}, mutations{reclaimEarly: true}, 0, "ttl", "before the"},
		{"silence counted as zero", "co-residency/pageable", tier.Faults{}, mutations{silentAsZero: true}, 0, "cold-reports", "stranded"},
		{"silence never resolved", "co-residency/pageable", tier.Faults{}, mutations{silentAsZero: true}, 0, "stranded-resolved", "probe freed"},
		{"growth reported as requested", "co-residency/pageable", tier.Faults{}, mutations{shortGrow: true}, 0, "growth-measured", "read-back finds"},
		{"unfundable ask drawn partly", "co-residency/pageable", tier.Faults{}, mutations{partialDraw: true}, 0, "refusal", "was funded"},
		{"floor refusal retried", "co-residency/file", tier.Faults{}, mutations{retrySmaller: true}, 0, "floor", "more attempts"},
		{"freed bytes left unclaimed", "co-residency/pageable", tier.Faults{}, mutations{leaveHole: true}, 0, "no-hole", "a hole of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := small(t)
			cfg.Faults, cfg.mut, cfg.PingPongTol = tt.faults, tt.mut, tt.tol
			m := run(t, cfg, tt.cells, 1<<20)
			if m.Passed() {
				t.Fatalf("%s passed with %s", tt.cells, tt.name)
			}
			var found []string
			for _, o := range m.Outcomes {
				if o.Err != nil {
					t.Fatalf("%s did not run: %v", o.Cell.Name(), o.Err)
				}
				for _, r := range o.Results {
					for _, g := range r.Gates {
						if !g.Pass {
							found = append(found, g.Name+": "+g.Reason)
							// A fault injected on purpose must fail, not "cannot tell".
							if g.Name == tt.gate && strings.Contains(g.Reason, tt.reason) && g.Failed() {
								return
							}
						}
					}
				}
			}
			t.Errorf("gate %s did not fail with %q; failures:\n%s", tt.gate, tt.reason, strings.Join(found, "\n"))
		})
	}
}

func TestGateFunctions(t *testing.T) {
	dev := gpu.NewCPU()
	busy, _ := tier.Open(tier.Pageable, tier.Options{Dev: dev})
	defer busy.Close()
	slot, _ := busy.Alloc(4096)
	defer slot.Free()
	empty, _ := tier.Open(tier.Pageable, tier.Options{Dev: dev})
	defer empty.Close()
	other, _ := tier.Open(tier.Pageable, tier.Options{Dev: dev})
	defer other.Close()
	ledger := tier.NewLedger(time.Hour)
	ls, _ := other.Alloc(8192)
	ledger.Strand(ls, "test", time.Now())
	emptyLedger := tier.NewLedger(time.Hour)

	tests := []struct {
		name   string
		g      results.Gate
		pass   bool
		reason string
	}{
		{"identical", GateIdentical([]uint64{1, 2}, []uint64{1, 2}, nil), true, "2 blocks byte-identical"},
		{"identical, one differs", GateIdentical([]uint64{1, 2}, []uint64{1, 3}, nil), false, "block 1 hash"},
		{"identical, only the chosen blocks", GateIdentical([]uint64{1, 2}, []uint64{1, 3}, []int{0}), true, "1 blocks"},
		{"identical, missing read-back", GateIdentical([]uint64{1, 2}, []uint64{1}, nil), false, "not read back"},
		{"reached", GateReached([]Reach{{0, 10, 10, 10}}), true, "all 10 requested"},
		{"reached short, tier honest", GateReached([]Reach{{3, 10, 6, 6}}), false, "block 3 reached 6 of 10"},
		{"reached short, tier claims all", GateReached([]Reach{{3, 10, 10, 6}}), false, "the tier reported 10"},
		{"reached, nothing measured", GateReached(nil), false, "no restore"},
		{"stranded, all empty", GateStranded([]tier.Tier{empty}, emptyLedger), true, "every tier empty"},
		{"stranded, ledger holds a slot", GateStranded([]tier.Tier{empty}, ledger), false, "1 slots (8192 bytes) stranded and not reclaimed"},
		{"stranded, tier holds bytes", GateStranded([]tier.Tier{busy}, nil), false, "pageable tier still holds 4096"},
		{"unmeasured, fine", GateUnmeasured([]results.Metric{metric("a", "x", results.HigherIsBetter, 1), unmeasured("b", "x", results.HigherIsBetter, "why")}), true, "2 figures"},
		{"unmeasured, empty metric", GateUnmeasured([]results.Metric{{Name: "a", Unit: "x", Better: results.HigherIsBetter}}), false, "a has no samples and no reason"},
		{"unmeasured, both", GateUnmeasured([]results.Metric{{Name: "a", Samples: []float64{0}, Unmeasured: "why"}}), false, "marked unmeasured"},
		{"unmeasured, NaN", GateUnmeasured([]results.Metric{{Name: "a", Samples: []float64{math.NaN()}}}), false, "NaN"},
		{"bandwidth, interval at the floor", GateBandwidth("spill", []float64{5, 5.2}, []float64{10, 9.8}, "", 0.5), true, "(50–53%) (floor 50%)"},
		{"bandwidth, below", GateBandwidth("spill", []float64{4.9}, []float64{10}, "", 0.5), false, "below the floor of 50%"},
		{"bandwidth, ceiling unmeasured", GateBandwidth("restore", []float64{4.9}, nil, "no holder", 0.5), false, "unmeasured (no holder)"},
		{"bandwidth, no samples", GateBandwidth("restore", nil, []float64{10}, "", 0.5), false, "bandwidth unmeasured"},
		{"bandwidth, a NaN sample", GateBandwidth("spill", []float64{4, math.NaN()}, []float64{10}, "", 0.5), false, "a measurement is broken"},
		{"bandwidth, an infinite sample", GateBandwidth("spill", []float64{math.Inf(1)}, []float64{10}, "", 0.5), false, "a measurement is broken"},
		{"bandwidth, a zero ceiling", GateBandwidth("spill", []float64{4}, []float64{0}, "", 0.5), false, "a measurement is broken"},
	}
	for _, tt := range tests {
		if tt.g.Pass != tt.pass || !strings.Contains(tt.g.Reason, tt.reason) || tt.g.Undecided {
			t.Errorf("%s: pass=%v undecided=%v %q, want pass=%v and a reason with %q", tt.name, tt.g.Pass, tt.g.Undecided, tt.g.Reason, tt.pass, tt.reason)
		}
	}
	if g := GateStranded([]tier.Tier{empty}, nil); !g.Pass {
		t.Errorf("an empty tier without a ledger: %s", g.Reason)
	}
	m := ofCeiling("x", []float64{1}, nil, "no holder")
	if m.Measured() || !strings.Contains(m.Unmeasured, "no holder") {
		t.Errorf("a percentage of an unmeasured ceiling must be unmeasured with the reason, got %+v", m)
	}
}

// A bandwidth gate decides only when the interval of the cell's fraction of
// its ceiling is clear of the floor; noise around the floor (the H200's
// partial/device at 49.8% against 50%) cannot tell, and is not a failure.
func TestGateBandwidthIntervals(t *testing.T) {
	ceiling := []float64{10, 10.2, 9.9, 10.1, 10, 9.8}
	tests := []struct {
		name          string
		samples       []float64
		pass, undecid bool
		reason        string
	}{
		{"clearly above", []float64{7, 7.1, 6.9, 7.2, 7, 6.8}, true, false, "(floor 50%)"},
		{"clearly below", []float64{3, 3.1, 2.9, 3.2, 3, 2.8}, false, false, "below the floor of 50%"},
		{"median at the floor, interval across it", []float64{4.6, 5.4, 4.8, 5.2, 4.9, 5.1}, false, true, "cannot tell"},
		{"median below the floor, interval across it", []float64{4.8, 4.9, 4.7, 5.3, 4.95, 4.85}, false, true, "run more --samples"},
		{"one sample above, range stands for the interval", []float64{7}, true, false, "n=1"},
	}
	for _, tt := range tests {
		g := GateBandwidth("restore", tt.samples, ceiling, "", 0.5)
		if g.Pass != tt.pass || g.Undecided != tt.undecid || !strings.Contains(g.Reason, tt.reason) {
			t.Errorf("%s: pass=%v undecided=%v %q; want pass=%v undecided=%v with %q", tt.name, g.Pass, g.Undecided, g.Reason, tt.pass, tt.undecid, tt.reason)
		}
		r := results.Result{Gates: []results.Gate{g}}
		if r.Passed() != (tt.pass || tt.undecid) || r.Undecided() != tt.undecid {
			t.Errorf("%s: result passed=%v undecided=%v: an undecided gate is not a failure", tt.name, r.Passed(), r.Undecided())
		}
	}
	// A noisy ceiling widens the interval: the same cell cannot tell.
	if g := GateBandwidth("spill", []float64{7, 7.1, 6.9, 7.2, 7, 6.8}, []float64{10, 20, 9, 11, 15, 12}, "", 0.5); !g.Undecided {
		t.Errorf("a cell at 70%% of a ceiling spread 9–20 GB/s decided: %s", g.Reason)
	}
}

func TestLadderGates(t *testing.T) {
	tk := func(tick, rung int, cost time.Duration) regulator.Tick {
		return regulator.Tick{Decision: regulator.Decision{Tick: tick, Rung: rung}, Cost: cost}
	}
	ms := time.Millisecond
	// steady is n calm ticks on rung 0, those named costing 25 ms.
	steady := func(n int, slow ...int) []regulator.Tick {
		var ts []regulator.Tick
		for i := range n {
			c := ms
			if slices.Contains(slow, i) {
				c = 25 * ms
			}
			ts = append(ts, tk(i, 0, c))
		}
		return ts
	}
	tests := []struct {
		name     string
		ticks    []regulator.Tick
		failing  []string
		flaps    int
		perWin   int
		overruns int
	}{
		{"calm", []regulator.Tick{tk(0, 0, ms), tk(1, 1, ms), tk(9, 2, ms), tk(18, 0, ms)}, nil, 0, 1, 0},
		{"two changes in one cooldown", []regulator.Tick{tk(0, 0, ms), tk(2, 1, ms), tk(5, 0, ms)}, []string{"cooldown"}, 1, 2, 0},
		{"an overrun", []regulator.Tick{tk(0, 0, ms), tk(1, 0, 25*ms)}, []string{"tick-cost"}, 0, 0, 1},
		{"one isolated overrun in 40", steady(40, 19), nil, 0, 0, 1},
		{"two back to back in 40", steady(40, 19, 20), []string{"tick-cost"}, 0, 0, 2},
		{"three apart in 40", steady(40, 5, 19, 33), []string{"tick-cost"}, 0, 0, 3},
	}
	for _, tt := range tests {
		gates, st := ladderGates(tt.ticks, 8, 20*ms)
		var failing []string
		for _, g := range gates {
			if !g.Pass {
				failing = append(failing, g.Name)
			}
		}
		if fmt.Sprint(failing) != fmt.Sprint(tt.failing) || st.flaps != tt.flaps || st.perWindow != tt.perWin || st.overruns != tt.overruns {
			t.Errorf("%s: failing %v flaps %d per-window %d overruns %d; want %v %d %d %d", tt.name, failing, st.flaps, st.perWindow, st.overruns, tt.failing, tt.flaps, tt.perWin, tt.overruns)
		}
	}
}

func TestMatchAndParse(t *testing.T) {
	cells := Cells(Scenarios, tier.Kinds, []int64{64 << 20, 1 << 30})
	if len(cells) != 2*(len(Scenarios)*len(tier.Kinds)-2) {
		t.Errorf("%d cells: ladder on device and pinned should be the only ones left out", len(cells))
	}
	count := func(p string) int {
		m, err := Match(cells, p)
		if err != nil {
			return -1
		}
		return len(m)
	}
	for _, tt := range []struct {
		pattern string
		want    int
	}{
		{"", len(cells)},
		{"hibernate", 10},
		{"*/pinned", 2 * (len(Scenarios) - 1)},
		{"ladder", 6},
		{"ladder/device", -1},
		{"hibernate/file/64MiB", 1},
		{"hibernate/*/1GiB, abort/peer", 7},
		{"nosuch", -1},
		{"[", -1},
	} {
		if got := count(tt.pattern); got != tt.want {
			t.Errorf("Match(%q): %d cells, want %d", tt.pattern, got, tt.want)
		}
	}
	if _, err := ParseScenarios("hibernate,warp"); err == nil || !strings.Contains(err.Error(), `"warp"`) {
		t.Errorf("ParseScenarios: %v", err)
	}
}

// The matrix is drawn from the document alone: each scenario's key figure
// comes from its results' metrics, a cell that could not run says why, and
// a cell that was not run is told apart from one that does not apply.
func TestTable(t *testing.T) {
	const mb = 64 << 20
	ceil := &Ceiling{Tier: tier.Pinned, Size: mb, Blocks: 16, Spill: []float64{8, 10}, Restore: []float64{4, 5}}
	res := func(sc Scenario, k tier.Kind, kv []string, gates []results.Gate, ms ...results.Metric) results.Result {
		e := &cellEnv{cell: Cell{sc, k, mb}}
		return results.Result{Name: string(sc), Params: e.params(kv...), Metrics: ms, Gates: gates}
	}
	ok := []results.Gate{pass("identical", "ok")}
	m := &Matrix{Config: Config{Blocks: 16}, Ceilings: []Ceiling{*ceil,
		{Tier: tier.File, Size: mb, Shards: []int64{1 << 20, 2 << 20}, Blocks: 5, Unmeasured: "no room in /tmp"}}}
	add := func(c Cell, err error, rs ...results.Result) {
		m.Outcomes = append(m.Outcomes, Outcome{Cell: c, Err: err, Results: rs})
	}
	add(Cell{Hibernate, tier.Pinned, mb}, nil, res(Hibernate, tier.Pinned, []string{"blocks", "16"}, ok, bandwidthMetrics(ceil, []float64{6, 7.04}, []float64{2, 3.5})...))
	add(Cell{Hibernate, tier.File, mb}, nil, res(Hibernate, tier.File, nil, []results.Gate{fail("reached", "block 2 short"), fail("stranded", "4 KiB left")}))
	add(Cell{Partial, tier.Pinned, mb}, nil,
		res(Partial, tier.Pinned, []string{"fraction", "25"}, ok, metric("restore", "GB/s", results.HigherIsBetter, 1, 1.25)),
		res(Partial, tier.Pinned, []string{"fraction", "50"}, ok, metric("restore", "GB/s", results.HigherIsBetter, 2.25)),
		res(Partial, tier.Pinned, []string{"fraction", "75"}, ok, metric("restore", "GB/s", results.HigherIsBetter, 3)))
	add(Cell{RestoreGate, tier.Pinned, mb}, nil, res(RestoreGate, tier.Pinned, nil, ok,
		metric("verify", "ms", results.LowerIsBetter, 0.9, 0.3, 0.5), metric("short_missing", "B", results.LowerIsBetter, 4109)))
	undecided := fail("bandwidth.restore", "cannot tell: wide interval")
	undecided.Undecided = true
	add(Cell{Uneven, tier.Pinned, mb}, nil, res(Uneven, tier.Pinned, []string{"shares", "1:2:3:5:8"}, []results.Gate{undecided}))
	add(Cell{PingPong, tier.Pinned, mb}, nil, res(PingPong, tier.Pinned, nil, ok,
		metric("predicted", "ms", results.LowerIsBetter, 1, 2, 3), metric("turn", "ms", results.LowerIsBetter, 2, 4, 3), metric("model_error", "%", results.LowerIsBetter, 10, 20, 30)))
	add(Cell{MultiSession, tier.Pinned, mb}, nil, res(MultiSession, tier.Pinned, []string{"sessions", "4"}, ok,
		metric("operations", "ops", results.HigherIsBetter, 48), metric("switches", "switches", results.HigherIsBetter, 28)))
	ladder := func(changes, perWindow float64, costs ...float64) results.Result {
		return res(Ladder, tier.File, nil, ok, metric("tick_cost", "us", results.LowerIsBetter, costs...), metric("interval", "ms", results.LowerIsBetter, 20),
			metric("rung_changes", "changes", results.LowerIsBetter, changes), metric("changes_per_cooldown", "changes", results.LowerIsBetter, perWindow))
	}
	add(Cell{Ladder, tier.File, mb}, nil, ladder(5, 1, 100, 2600), ladder(2, 2, 300), ladder(4, 1, 50))
	add(Cell{Abort, tier.Pinned, mb}, nil, res(Abort, tier.Pinned, nil, ok,
		metric("stranded", "MiB", results.HigherIsBetter, 3), metric("reclaim_after", "ms", results.LowerIsBetter, 51.2)))
	add(Cell{CoResidency, tier.Pinned, mb}, nil, res(CoResidency, tier.Pinned, nil, ok, metric("claimed", "MiB", results.HigherIsBetter, 2.8)))
	add(Cell{Abort, tier.File, mb}, fmt.Errorf("holder died"), res(Abort, tier.File, nil, []results.Gate{fail("ttl", "early")}))
	doc := &results.Document{Suite: Suite, Env: m.Env(), Results: m.Results()}
	var b bytes.Buffer
	if err := Table(&b, doc); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"spill matrix, pool 64MiB in 16 blocks\n",
		"PASS 7.0/3.5 GB/s 70%", // the lesser share of the ceiling: restore 3.5 of 5
		"FAIL reached +1",
		"PASS R 1.2/2.2/3.0 GB/s",
		"PASS caught −4109 B, verify 0.3 ms",
		"CANNOT-TELL bandwidth.restore",
		"PASS pred 2.00/meas 3.00 ms (error 20%, median of turns)",
		"PASS 4 sessions, 48 ops, 28 switches",
		"PASS changes 5/2/4, ≤2/cooldown, tick ≤13% of interval",
		"PASS stranded 3 MiB → reclaimed after 51ms",
		"PASS claimed 2.8 MiB, 1 refused, floor held",
		"FAIL error +1",
		"n/a: ladder/pinned: the ladder spills to pinned first",
		"pinned  64MiB, 16 blocks",
		"64MiB, 5 blocks in 2 shards at once  unmeasured  unmeasured  no room in /tmp",
		"hibernate/file/64MiB: reached: block 2 short",
		"abort/file/64MiB: error: holder died\n  abort/file/64MiB: ttl: early",
		"1 gate(s) that cannot tell",
		"uneven/pinned/64MiB: bandwidth.restore: cannot tell: wide interval",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("matrix lacks %q:\n%s", want, out)
		}
	}
	// Cells not run are dots: multi-session ran only on pinned. (This grid
	// is too wide for 100 columns, so its file cell is on the next line.)
	if rows := strings.SplitAfterN(out[strings.Index(out, "multi-session"):], "\n", 3); strings.Count(rows[0]+rows[1], "·") != 1 {
		t.Errorf("multi-session: want one cell not run (file), got %q", rows[:2])
	}
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > units.TextWidth {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	// A document from before the block count was in the environment takes
	// it from a cell that names it.
	doc.Env = nil
	b.Reset()
	if err := Table(&b, doc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "pool 64MiB in 16 blocks\n") {
		t.Errorf("without the environment's block count:\n%s", b.String())
	}
	rs := m.Results()
	last := rs[len(rs)-1]
	if last.Params["status"] != "error" || last.Passed() || !strings.Contains(last.Gates[0].Reason, "holder died") {
		t.Errorf("a cell that could not run must be a failing result, got %+v", last)
	}
	if m.Passed() || len(m.Failures()) != 4 {
		t.Errorf("passed %v, failures %v", m.Passed(), m.Failures())
	}
}

// A run leaves nothing behind: no segment in the shm folder, no holder.
func TestNoLeftovers(t *testing.T) {
	cfg := small(t)
	run(t, cfg, "hibernate/peer,abort/pinned,ladder/peer", 1<<20)
	ents, err := os.ReadDir(cfg.ShmDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("left in the shm folder: %v", names)
	}
}

// Only 0 means a default: a negative count or time is refused, not
// quietly replaced by the default.
func TestNegativeConfigRefused(t *testing.T) {
	cells, err := Match(Cells(Scenarios, tier.Kinds, []int64{1 << 20}), "hibernate/pageable")
	if err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"blocks":   func(c *Config) { c.Blocks = -3 },
		"samples":  func(c *Config) { c.Samples = -2 },
		"sessions": func(c *Config) { c.Sessions = -1 },
		"cooldown": func(c *Config) { c.Cooldown = -5 },
		"TTL":      func(c *Config) { c.TTL = -time.Second },
		"interval": func(c *Config) { c.Interval = -time.Second },
		"floor":    func(c *Config) { c.Floor = -0.5 },
	} {
		cfg := small(t)
		mut(&cfg)
		if m, err := Run(context.Background(), cfg, cells, nil); err == nil || m != nil {
			t.Errorf("negative %s: ran (%v)", name, err)
		}
	}
}

// Sizes whose pool and tier copy cannot fit are refused before any cell
// runs, with the numbers; small ones pass.
func TestCheckFits(t *testing.T) {
	dev := gpu.NewCPU()
	huge := Cells([]Scenario{Hibernate}, []tier.Kind{tier.Pageable, tier.File}, []int64{1 << 50})
	var fe *gpu.FitError
	if err := CheckFits(dev, huge); !errors.As(err, &fe) || fe.Need != 2<<50 || !strings.Contains(err.Error(), "--sizes 1 PiB") {
		t.Errorf("1 PiB pools through pageable memory: %v; want a FitError needing 2 PiB of host memory", err)
	}
	if err := CheckFits(dev, Cells(Scenarios, tier.Kinds, []int64{1 << 20})); err != nil {
		t.Errorf("1 MiB pools refused: %v", err)
	}
}

// A figure above 105% of its ceiling warns, naming the tier, the ceiling's
// size and how it was moved; one within it does not.
func TestOverCeilingWarns(t *testing.T) {
	c := &Ceiling{Tier: tier.File, Size: 64 << 20, Where: "files in /tmp/x", Spill: []float64{2, 2.5}, Restore: []float64{2.5}}
	w := overCeiling("restore", []float64{4, 4.5, 5}, c, c.Restore)
	for _, want := range []string{"restore 180% of the file tier's ceiling", "2.50 GB/s", "64MiB as one slot", "files in /tmp/x", "above 105%"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q lacks %q", w, want)
		}
	}
	if w := overCeiling("spill", []float64{2.6}, c, c.Spill); w != "" {
		t.Errorf("104%% of the ceiling warned: %s", w)
	}
	c.Shards, c.Blocks = []int64{1 << 20, 2 << 20}, 3
	if w := overCeiling("restore", []float64{4}, c, c.Restore); !strings.Contains(w, "3 blocks in 2 shards at once on 2 streams") {
		t.Errorf("a sharded ceiling's warning %q does not say how it moved", w)
	}
	if r := c.Result(); r.Params["shards"] != "1MiB+2MiB" {
		t.Errorf("sharded ceiling result params %v", r.Params)
	}
}

// Ctrl-C inside a cell drops that cell: a cell cut short is neither a pass
// nor a failure (it was recorded as FAIL). The cells before it are kept.
func TestRunDropsTheCellInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := Config{Dev: gpu.NewCPU(), Blocks: 4, Samples: 1, ShmDir: t.TempDir()}
	cells := []Cell{{Hibernate, tier.Pageable, 1 << 20}, {Hibernate, tier.Device, 1 << 20}, {Partial, tier.Device, 1 << 20}}
	m, err := Run(ctx, cfg, cells, func(i int, c Cell) {
		if i == 1 {
			cancel() // as the second cell starts: it runs on a canceled context
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if len(m.Outcomes) != 1 || m.Outcomes[0].Cell != cells[0] {
		t.Fatalf("outcomes %+v, want only the first cell", m.Outcomes)
	}
	// The finished cell is judged on its own measurements (one sample each
	// here, so its bandwidth gate may go either way on a loaded machine),
	// never on the interrupt.
	for _, f := range m.Outcomes[0].Failures() {
		if strings.Contains(f, "cancel") || strings.Contains(f, "interrupt") {
			t.Errorf("the finished cell failed on the interrupt: %s", f)
		}
	}
}

// The layout check needs no pool: a billion blocks are refused at once, and
// uneven, whose blocks are at least 64 KiB, only when a shard is too small.
func TestCheckLayout(t *testing.T) {
	cells := []Cell{{Hibernate, tier.Device, 64 << 20}, {Uneven, tier.Device, 64 << 20}}
	err := CheckLayout(cells, 1_000_000_000)
	if !badinput.Is(err) || !strings.HasSuffix(err.Error(), ": hibernate/device/64MiB") {
		t.Errorf("a billion blocks: %v", err)
	}
	if err := CheckLayout(cells, 16); err != nil {
		t.Errorf("the default layout refused: %v", err)
	}
	if err := CheckLayout([]Cell{{Uneven, tier.Pageable, 64 << 10}}, 16); err == nil {
		t.Error("uneven at 64KiB (a shard of 0 bytes) passed")
	}
}

// A grid wider than matrixWidth prints a line per cell instead.
func TestWriteMatrixFitsWidth(t *testing.T) {
	long := strings.Repeat("x", 40)
	for _, tc := range []struct {
		text string
		grid bool
	}{{"PASS 1.0 GB/s", true}, {long, false}} {
		row := []string{"hibernate"}
		for range tier.Kinds {
			row = append(row, tc.text)
		}
		var b bytes.Buffer
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		writeMatrix(tw, tier.Kinds, [][]string{row})
		tw.Flush()
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); n > matrixWidth {
				t.Errorf("%q: a line of %d columns: %q", tc.text, n, l)
			}
		}
		if want := map[bool]int{true: 2, false: 1 + len(tier.Kinds)}[tc.grid]; len(lines) != want {
			t.Errorf("%q: %d lines, want %d:\n%s", tc.text, len(lines), want, b.String())
		}
	}
}
