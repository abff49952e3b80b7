package regulator

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/trace"
)

// rig: a 16-block pool of 1 MiB blocks that is 60% of the budget, pinned
// room for 40% of the pool, an unbounded pageable deep tier.
type rig struct {
	reg    *Regulator
	pool   *tier.Pool
	s      gpu.Stream
	before []uint64
}

const blk = 1 << 20

func newRig(t *testing.T, cfg Config) *rig {
	t.Helper()
	dev := gpu.NewCPU()
	s, _ := dev.NewStream()
	pool, err := tier.NewPool(dev, tier.EvenBlocks(16*blk, 16))
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := tier.Open(tier.Pinned, tier.Options{Dev: dev, Capacity: 6 * blk, ShmDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	deep, _ := tier.Open(tier.Pageable, tier.Options{Dev: dev})
	t.Cleanup(func() { pool.Close(); pinned.Close(); deep.Close() })
	pool.FillAll(s, 42)
	before, _ := pool.Hashes(s)
	if cfg.Budget == 0 {
		cfg.Budget = int64(float64(pool.Bytes()) / 0.6)
	}
	// Spilled blocks are overwritten, as the demand would, so the final
	// read-back measures the restores.
	cfg.AfterTick = func(d Decision) error {
		for _, i := range d.Spilled {
			if err := pool.Poison(s, i); err != nil {
				return err
			}
		}
		return nil
	}
	reg, err := New(cfg, pool, s, pinned, deep)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{reg: reg, pool: pool, s: s, before: before}
}

// steps runs a curve without waiting between ticks.
func (r *rig) steps(t *testing.T, c Curve) []Decision {
	t.Helper()
	var out []Decision
	for k := 0; k < c.Ticks; k++ {
		d, err := r.reg.Step(context.Background(), int64(c.Demand(k)*float64(r.reg.cfg.Budget)))
		if err == nil {
			err = r.reg.cfg.AfterTick(d)
		}
		if err != nil {
			t.Fatalf("tick %d: %v", k, err)
		}
		out = append(out, d)
	}
	return out
}

func (r *rig) verify(t *testing.T) {
	t.Helper()
	if !r.reg.AllResident() {
		t.Fatalf("not all resident at the end (rung %d)", r.reg.Rung())
	}
	for i, b := range r.pool.Blocks() {
		c, _ := r.pool.Check(r.s, i)
		if c.Hash != r.before[i] || c.Reached != b.Len {
			t.Errorf("block %d: hash %x reached %d, want %x and %d", i, c.Hash, c.Reached, r.before[i], b.Len)
		}
	}
}

func rungsOf(ds []Decision) []int {
	var out []int
	for i, d := range ds {
		if i == 0 || d.Rung != ds[i-1].Rung {
			out = append(out, d.Rung)
		}
	}
	return out
}

func TestRampClimbsAndDescends(t *testing.T) {
	r := newRig(t, Config{Cooldown: 4, MaxMove: 2 * blk})
	ds := r.steps(t, Ramp(0.05, 0.95, 24, 4, 12, 24))
	if got, want := rungsOf(ds), []int{0, 1, 2, 3, 2, 1, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("rungs (-want +got):\n-%v\n+%v", want, got)
	}
	var refused bool
	for _, d := range ds {
		if d.Rung == trace.RungRefuse && d.Refused > 0 {
			refused = true
			if d.Demand >= d.Requested {
				t.Errorf("tick %d: refusing, yet admitted %d of %d", d.Tick, d.Demand, d.Requested)
			}
		}
		if d.Moved > 3*blk {
			t.Errorf("tick %d moved %d bytes, cap is 2 MiB plus at most one block", d.Tick, d.Moved)
		}
		if d.HostTail > 0 && d.Pinned < 6*blk-blk {
			t.Errorf("tick %d: %d bytes in the deep tier while pinned holds only %d", d.Tick, d.HostTail, d.Pinned)
		}
	}
	if !refused {
		t.Error("demand above what even a fully spilled pool allows was never refused")
	}
	r.verify(t)
}

func TestCooldownAndHysteresis(t *testing.T) {
	osc := Oscillation(0.26, 0.10, 6, 8, 0.05, 30)
	for _, cooldown := range []int{1, 8} {
		r := newRig(t, Config{Cooldown: cooldown, MaxMove: 4 * blk})
		ds := r.steps(t, osc)
		last, changes := -1000, 0
		for _, d := range ds {
			if !d.Changed {
				continue
			}
			changes++
			if d.Tick-last < cooldown {
				t.Errorf("cooldown %d: changes at ticks %d and %d", cooldown, last, d.Tick)
			}
			last = d.Tick
		}
		if cooldown == 8 && changes > osc.Ticks/8+1 {
			t.Errorf("cooldown 8: %d changes in %d ticks", changes, osc.Ticks)
		}
		if cooldown == 1 && changes < 4 {
			t.Errorf("cooldown 1 on a demand crossing both edges of the band: only %d changes; the test does not exercise hysteresis", changes)
		}
		r.verify(t)
	}
}

func TestInsideBandNoChange(t *testing.T) {
	// Demand swings inside the hysteresis band of rung 0: headroom stays
	// between 0.10 and 0.20 (demand 0.21..0.29 with the pool at 0.6).
	r := newRig(t, Config{Cooldown: 1})
	ds := r.steps(t, Oscillation(0.25, 0.04, 4, 10, 0.25, 0))
	for _, d := range ds {
		if d.Rung != 0 || d.Moved != 0 {
			t.Fatalf("tick %d: rung %d moved %d inside the band", d.Tick, d.Rung, d.Moved)
		}
	}
}

func TestSpikeJumps(t *testing.T) {
	r := newRig(t, Config{Cooldown: 4})
	ds := r.steps(t, Spike(0.1, 0.85, 3, 6, 20))
	if got := rungsOf(ds); len(got) < 3 || got[1] != trace.RungDeep {
		t.Errorf("rungs %v: a spike that pinned cannot absorb should go 0→2 in one change", got)
	}
	r.verify(t)
}

func TestBadConfig(t *testing.T) {
	dev := gpu.NewCPU()
	pool, _ := tier.NewPool(dev, []int64{blk})
	defer pool.Close()
	s, _ := dev.NewStream()
	if _, err := New(Config{Budget: blk / 2}, pool, s, nil, nil); err == nil {
		t.Error("budget smaller than the pool accepted")
	}
	if _, err := New(Config{Budget: blk, Low: 0.3, High: 0.2}, pool, s, nil, nil); err == nil {
		t.Error("low above high accepted")
	}
	// Only 0 means the default; a negative value is refused.
	if _, err := New(Config{Budget: blk, Cooldown: -1}, pool, s, nil, nil); err == nil || !strings.Contains(err.Error(), "cooldown -1") {
		t.Errorf("negative cooldown: %v", err)
	}
	if _, err := New(Config{Budget: blk, Interval: -time.Millisecond}, pool, s, nil, nil); err == nil || !strings.Contains(err.Error(), "interval -1ms") {
		t.Errorf("negative interval: %v", err)
	}
}

// Tracing is pure logging: the same decisions with and without a writer,
// even one that throttles.
func TestTracingDoesNotChangeDecisions(t *testing.T) {
	c := Spike(0.1, 0.85, 3, 6, 20)
	run := func(tr Tracer) []Decision {
		r := newRig(t, Config{Cooldown: 3, Interval: time.Millisecond, MaxMove: 2 * blk})
		ticks, err := r.reg.Run(context.Background(), c, tr, "s")
		if err != nil {
			t.Fatal(err)
		}
		var ds []Decision
		for _, tk := range ticks {
			ds = append(ds, tk.Decision)
		}
		r.verify(t)
		return ds
	}
	var buf bytes.Buffer
	w := trace.NewWriter(&buf, trace.Options{Every: 5 * time.Millisecond})
	with := run(w)
	w.Close()
	without := run(nil)
	if !reflect.DeepEqual(with, without) {
		t.Errorf("decisions differ with tracing on:\n%+v\nand off:\n%+v", with, without)
	}
	f, err := trace.Read(&buf, "trace")
	if err != nil || len(f.Bad) > 0 {
		t.Fatalf("trace: %v %v", err, f.Bad)
	}
	sum := trace.Summarize(f, trace.SummaryOptions{}).Sessions[0]
	if sum.Ticks != int64(c.Ticks) {
		t.Errorf("trace accounts for %d ticks, ran %d", sum.Ticks, c.Ticks)
	}
	changes := 0
	for i := 1; i < len(with); i++ {
		if with[i].Rung != with[i-1].Rung {
			changes++
		}
	}
	if sum.RungChanges != changes {
		t.Errorf("trace shows %d rung changes, the run made %d: a rung change was dropped", sum.RungChanges, changes)
	}
}
