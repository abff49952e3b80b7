package spill

import (
	"context"
	"fmt"
	"time"

	"github.com/mstar-dev/mstar/internal/units"

	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/reports/results"
)

// Co-residency: tenants share one device budget. A tenant going cold
// releases bytes from each source it holds; every source reports what it
// actually gave, and a source that reports nothing is stranded — its bytes
// stay counted as held (the safe direction) until a TTL passes and a probe
// measures them — never counted as a zero. A tenant going hot grows, and the
// growth is read back and reported as measured. An ask that free memory
// cannot fund is refused with the arithmetic and moves nothing, never a
// partial draw. A release refused at a tenant's floor is not retried
// smaller. Bytes one tenant frees are claimed by another: a hole of free
// memory left behind fails the cell.

type coSource struct {
	name   string
	lens   []int64
	seed   uint64
	pool   *tier.Pool // nil while released
	slots  []tier.Slot
	before []uint64
	silent bool // releases, but reports nothing
}

func (s *coSource) bytes() int64 {
	var n int64
	for _, l := range s.lens {
		n += l
	}
	return n
}

type coTenant struct {
	name    string
	sources []*coSource
	floor   int64
}

func (t *coTenant) resident() int64 {
	var n int64
	for _, s := range t.sources {
		if s.pool != nil {
			n += s.bytes()
		}
	}
	return n
}

// sourceReport is what one source says it gave; Gave nil: it said nothing.
type sourceReport struct {
	Source string
	Asked  int64
	Gave   *int64
}

type coPolicy struct {
	e        *cellEnv
	t        tier.Tier
	budget   int64
	held     int64 // bytes counted as on the device
	stranded map[*coSource]time.Time
	actuated int     // actuator calls (releases and grows)
	reach    []Reach // of every restore from the tier
}

func (c *coPolicy) free() int64 { return c.budget - c.held }

func (c *coPolicy) strandedBytes() int64 {
	var n int64
	for s := range c.stranded {
		n += s.bytes()
	}
	return n
}

// newSource allocates and fills a source's blocks: a grow. The growth is
// read back; the figure returned is what the read-back measured.
func (c *coPolicy) grow(s *coSource) (int64, error) {
	c.actuated++
	p, err := tier.NewPool(c.e.dev, s.lens)
	if err != nil {
		return 0, err
	}
	s.pool = p
	if err := p.FillAll(c.e.s, s.seed); err != nil {
		return 0, err
	}
	if c.e.cfg.mut.shortGrow {
		// The last block's memory never arrives, and the request is reported.
		defer func() { _ = p.Poison(c.e.s, len(s.lens)-1) }()
	}
	var measured int64
	s.before = make([]uint64, len(s.lens))
	for i, l := range s.lens {
		ch, err := p.Check(c.e.s, i)
		if err != nil {
			return measured, err
		}
		s.before[i] = ch.Hash
		if ch.Reached == l {
			measured += l
		}
	}
	return measured, nil
}

// readBack measures the bytes of a source's blocks that hold its content.
func (c *coPolicy) readBack(s *coSource) (int64, error) {
	if s.pool == nil {
		return 0, nil
	}
	var n int64
	for i, l := range s.lens {
		ch, err := s.pool.Check(c.e.s, i)
		if err != nil {
			return n, err
		}
		if ch.Reached == l && ch.Hash == s.before[i] {
			n += l
		}
	}
	return n, nil
}

// release spills a source to the tier and frees its device memory; the
// report is the bytes that reached the tier, or nothing for a silent source.
func (c *coPolicy) release(ctx context.Context, s *coSource) (*int64, error) {
	c.actuated++
	if s.silent {
		// Its memory goes, but it says nothing about it.
		err := s.pool.Close()
		s.pool = nil
		return nil, err
	}
	slots, n, _, err := spillBlocks(ctx, c.e.s, c.t, s.pool, all(len(s.lens)))
	s.slots = slots
	if err != nil {
		return nil, err
	}
	if err := s.pool.Close(); err != nil {
		return nil, err
	}
	s.pool = nil
	return &n, nil
}

// cold releases every source of a tenant. Totals come only from results.
func (c *coPolicy) cold(ctx context.Context, t *coTenant) ([]sourceReport, error) {
	var out []sourceReport
	for _, s := range t.sources {
		if s.pool == nil {
			continue
		}
		gave, err := c.release(ctx, s)
		if err != nil {
			return out, fmt.Errorf("%s/%s: %w", t.name, s.name, err)
		}
		if gave == nil && c.e.cfg.mut.silentAsZero {
			gave = new(int64)
		}
		out = append(out, sourceReport{Source: s.name, Asked: s.bytes(), Gave: gave})
		if gave == nil {
			c.stranded[s] = time.Now()
			continue
		}
		c.held -= *gave
	}
	return out, nil
}

// ask is a tenant's request to grow by the given sources. It is funded from
// free memory or refused whole, with the arithmetic.
func (c *coPolicy) ask(ctx context.Context, t *coTenant, srcs []*coSource, restore bool) (measured int64, refusal string, err error) {
	var want int64
	for _, s := range srcs {
		want += s.bytes()
	}
	if want > c.free() && c.e.cfg.mut.partialDraw {
		// Draw what is free: as many blocks as fit.
		for _, s := range srcs {
			if fit := c.free() / s.lens[0]; fit > 0 {
				s.lens = s.lens[:min(int(fit), len(s.lens))]
				got, err := c.grow(s)
				c.held += got
				measured += got
				if err != nil {
					return measured, "", err
				}
				t.sources = append(t.sources, s)
			}
		}
		return measured, "", nil
	}
	if want > c.free() {
		return 0, fmt.Sprintf("%s asks %s; free is %s (budget %s − held %s); %s stranded not counted as free",
			t.name, units.Bytes(want), units.Bytes(c.free()), units.Bytes(c.budget), units.Bytes(c.held), units.Bytes(c.strandedBytes())), nil
	}
	for _, s := range srcs {
		var got int64
		if restore && s.slots != nil {
			got, err = c.restoreSource(ctx, s)
		} else {
			got, err = c.grow(s)
		}
		c.held += got
		measured += got
		if err != nil {
			return measured, "", err
		}
		if !containsSource(t.sources, s) {
			t.sources = append(t.sources, s)
		}
	}
	return measured, "", nil
}

func containsSource(ss []*coSource, s *coSource) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// restoreSource brings a released source back from the tier; the figure is
// the measured bytes of blocks that came back whole.
func (c *coPolicy) restoreSource(ctx context.Context, s *coSource) (int64, error) {
	c.actuated++
	p, err := tier.NewPool(c.e.dev, s.lens)
	if err != nil {
		return 0, err
	}
	s.pool = p
	if err := poisonBlocks(c.e.s, p, all(len(s.lens))); err != nil {
		return 0, err
	}
	rep, _, _, err := restoreBlocks(ctx, c.e.s, p, all(len(s.lens)), s.slots)
	if err != nil {
		return 0, err
	}
	_, reach, err := checkBlocks(c.e.s, p, all(len(s.lens)), rep)
	if err != nil {
		return 0, err
	}
	var measured int64
	for _, r := range reach {
		measured += r.Measured
	}
	c.reach = append(c.reach, reach...)
	freeSlots(s.slots)
	s.slots = nil
	return measured, nil
}

// releaseAbove asks a tenant to give n bytes without going below its floor;
// a refusal is returned as is, never retried smaller.
func (c *coPolicy) releaseAbove(ctx context.Context, t *coTenant, n int64) (string, error) {
	c.actuated++
	if t.resident()-n < t.floor && c.e.cfg.mut.retrySmaller && n > 4096 {
		return c.releaseAbove(ctx, t, n/2)
	}
	if t.resident()-n < t.floor {
		return fmt.Sprintf("%s holds %s with a floor of %s: releasing %s would leave %s",
			t.name, units.Bytes(t.resident()), units.Bytes(t.floor), units.Bytes(n), units.Bytes(t.resident()-n)), nil
	}
	return "", nil // nothing to refuse; the caller's gate says so
}

// resolve probes stranded sources whose TTL has passed: a released source
// holds nothing on the device, which the probe measures.
func (c *coPolicy) resolve(now time.Time, ttl time.Duration) int64 {
	var freed int64
	for s, since := range c.stranded {
		if now.Sub(since) < ttl {
			continue
		}
		if s.pool == nil { // measured: nothing left on the device
			c.held -= s.bytes()
			freed += s.bytes()
		}
		delete(c.stranded, s)
	}
	return freed
}

func runCoResidency(ctx context.Context, e *cellEnv) error {
	unit := e.cell.Size / 16 / 4096 * 4096
	blocks := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = unit
		}
		return out
	}
	budget := 16 * unit
	// Room for two tenants' worth of released bytes at once.
	t, err := e.openTier(e.cell.Tier, capFor(blocks(32)), 0)
	if err != nil {
		return err
	}
	c := &coPolicy{e: e, t: t, budget: budget, stranded: map[*coSource]time.Time{}}
	src := func(name string, n int, seed uint64, silent bool) *coSource {
		return &coSource{name: name, lens: blocks(n), seed: e.cfg.Seed + seed, silent: silent}
	}
	kv, experts, scratch := src("kv", 6, 1, false), src("experts", 4, 2, false), src("scratch", 1, 3, true)
	llm := &coTenant{name: "llm"}
	vision := &coTenant{name: "vision", floor: 2 * unit}
	audio := &coTenant{name: "audio"}
	defer func() {
		for _, tn := range []*coTenant{llm, vision, audio} {
			for _, s := range tn.sources {
				if s.pool != nil {
					s.pool.Close()
				}
				freeSlots(s.slots)
			}
		}
	}()
	if _, refusal, err := c.ask(ctx, llm, []*coSource{kv, experts, scratch}, false); err != nil || refusal != "" {
		return fmt.Errorf("setup llm: %v %s", err, refusal)
	}
	if _, refusal, err := c.ask(ctx, vision, []*coSource{src("weights", 3, 4, false)}, false); err != nil || refusal != "" {
		return fmt.Errorf("setup vision: %v %s", err, refusal)
	}
	freeBefore := c.free()
	var gates []results.Gate

	// 1. llm goes cold.
	reps, err := c.cold(ctx, llm)
	if err != nil {
		return err
	}
	var released, strandedNow int64
	var silentOK = true
	for _, r := range reps {
		if r.Gave != nil {
			released += *r.Gave
		} else if r.Source != "scratch" {
			silentOK = false
		}
	}
	strandedNow = c.strandedBytes()
	switch {
	case released != kv.bytes()+experts.bytes():
		gates = append(gates, fail("cold-reports", "llm released %d bytes by its sources' reports, they hold %d", released, kv.bytes()+experts.bytes()))
	case strandedNow != scratch.bytes() || !silentOK:
		gates = append(gates, fail("cold-reports", "the silent source should be stranded with its %d bytes, found %d stranded", scratch.bytes(), strandedNow))
	case c.held != vision.resident()+scratch.bytes():
		gates = append(gates, fail("cold-reports", "held %d after the cold event, want vision %d + stranded %d", c.held, vision.resident(), scratch.bytes()))
	default:
		gates = append(gates, pass("cold-reports", "llm: kv and experts reported %s given; scratch reported nothing and is stranded (%s, still counted as held), not zero",
			units.Bytes(released), units.Bytes(strandedNow)))
	}

	// 2. audio goes hot and claims what llm freed; growth read back.
	nAud := int(released / unit)
	if e.cfg.mut.leaveHole {
		nAud--
	}
	aud := src("state", nAud, 5, false)
	grown, refusal, err := c.ask(ctx, audio, []*coSource{aud}, false)
	if err != nil {
		return err
	}
	if e.cfg.mut.shortGrow {
		grown = aud.bytes()
	}
	readBack, err := c.readBack(aud)
	if err != nil {
		return err
	}
	switch {
	case refusal != "":
		gates = append(gates, fail("growth-measured", "audio's grow of %s was refused: %s", units.Bytes(aud.bytes()), refusal))
	case grown != readBack:
		gates = append(gates, fail("growth-measured", "audio's growth reported as %d bytes; a read-back finds %d", grown, readBack))
	case readBack != aud.bytes():
		gates = append(gates, fail("growth-measured", "audio asked %d bytes and, measured, grew %d", aud.bytes(), readBack))
	default:
		gates = append(gates, pass("growth-measured", "audio grew %s, every byte read back", units.Bytes(grown)))
	}
	if hole := c.free() - freeBefore; hole > 0 {
		gates = append(gates, fail("no-hole", "llm freed %s, audio claimed %s: a hole of %s is left", units.Bytes(released), units.Bytes(grown), units.Bytes(hole)))
	} else {
		gates = append(gates, pass("no-hole", "the %s llm freed were claimed by audio", units.Bytes(released)))
	}

	// 3. An unfundable ask: refused with the arithmetic, nothing moves.
	snap := func() string {
		s := fmt.Sprintf("held=%d tier=%d", c.held, t.Used())
		for _, tn := range []*coTenant{llm, vision, audio} {
			for _, so := range tn.sources {
				if so.pool != nil {
					h, _ := so.pool.Hashes(e.s)
					s += fmt.Sprintf(" %s/%s=%x", tn.name, so.name, h)
				}
			}
		}
		return s
	}
	before, acts := snap(), c.actuated
	big := src("extra", 6, 6, false)
	_, refusal, err = c.ask(ctx, vision, []*coSource{big}, false)
	if err != nil {
		return err
	}
	switch {
	case refusal == "":
		gates = append(gates, fail("refusal", "vision's ask of %s was funded from %s free", units.Bytes(big.bytes()), units.Bytes(c.free())))
	case snap() != before || c.actuated != acts:
		gates = append(gates, fail("refusal", "refused (%s) but something moved: %d actuator calls", refusal, c.actuated-acts))
	default:
		gates = append(gates, pass("refusal", "refused whole, nothing moved: %s", refusal))
	}

	// 4. A release refused at the floor is not retried smaller.
	before, acts = snap(), c.actuated
	refusal, err = c.releaseAbove(ctx, vision, 2*unit)
	if err != nil {
		return err
	}
	switch {
	case c.actuated-acts != 1 || snap() != before:
		gates = append(gates, fail("floor", "floor refusal followed by %d more attempts or a move", c.actuated-acts-1))
	case refusal == "":
		gates = append(gates, fail("floor", "a release below vision's floor was not refused"))
	default:
		gates = append(gates, pass("floor", "refused once at the floor and not retried smaller: %s", refusal))
	}

	// 5. The stranded source: counted until the TTL, then measured and
	// claimed by vision.
	var since time.Time
	for _, at := range c.stranded {
		since = at
	}
	early := c.resolve(since.Add(e.cfg.TTL/2), e.cfg.TTL)
	time.Sleep(time.Until(since.Add(e.cfg.TTL)))
	late := c.resolve(time.Now(), e.cfg.TTL)
	extra := src("cache", int(late/unit), 7, false)
	var claimed int64
	if late > 0 {
		claimed, refusal, err = c.ask(ctx, vision, []*coSource{extra}, false)
		if err != nil {
			return err
		}
	}
	switch {
	case early != 0:
		gates = append(gates, fail("stranded-resolved", "%d stranded bytes counted free before the TTL", early))
	case late != scratch.bytes():
		gates = append(gates, fail("stranded-resolved", "after the TTL the probe freed %d bytes, scratch held %d", late, scratch.bytes()))
	case claimed != late || c.free() > freeBefore:
		gates = append(gates, fail("stranded-resolved", "the %d bytes resolved were not claimed (vision grew %d, %s): a hole", late, claimed, refusal))
	default:
		gates = append(gates, pass("stranded-resolved", "scratch stayed stranded for the %s TTL, then measured empty; its %s were claimed by vision", e.cfg.TTL, units.Bytes(late)))
	}

	// 6. llm hot again: audio goes cold to fund it; kv and experts come
	// back from the tier byte-identical.
	if _, err := c.cold(ctx, audio); err != nil {
		return err
	}
	scratch2 := src("scratch", 1, 8, false)
	back, refusal, err := c.ask(ctx, llm, []*coSource{kv, experts, scratch2}, true)
	if err != nil {
		return err
	}
	if refusal != "" {
		gates = append(gates, fail("rehydrate", "llm could not come back: %s", refusal))
	}
	var idents []results.Gate
	for _, s := range []*coSource{kv, experts} {
		if s.pool == nil {
			idents = append(idents, fail(GIdentical, "%s not restored", s.name))
			continue
		}
		after, err := s.pool.Hashes(e.s)
		if err != nil {
			return err
		}
		g := GateIdentical(s.before, after, nil)
		g.Reason = s.name + ": " + g.Reason
		idents = append(idents, g)
	}
	ident := idents[0]
	if ident.Pass {
		ident = idents[1]
		if ident.Pass {
			ident.Reason = idents[0].Reason + "; " + idents[1].Reason
		}
	}
	gates = append(gates, ident, GateReached(c.reach))

	// The end: every tenant leaves; the tier must be empty.
	for _, tn := range []*coTenant{llm, vision, audio} {
		for _, s := range tn.sources {
			if s.pool != nil {
				s.pool.Close()
				s.pool = nil
			}
			freeSlots(s.slots)
			s.slots = nil
		}
	}
	gates = append(gates, GateStranded([]tier.Tier{t}, nil))
	r := results.Result{Name: string(e.cell.Scenario), Params: e.params("tenants", "llm,vision,audio"),
		Metrics: []results.Metric{
			metric("released", "MiB", results.HigherIsBetter, float64(released)/(1<<20)),
			metric("stranded_until_ttl", "MiB", results.LowerIsBetter, float64(strandedNow)/(1<<20)),
			metric("claimed", "MiB", results.HigherIsBetter, float64(grown+claimed)/(1<<20)),
			metric("rehydrated", "MiB", results.HigherIsBetter, float64(back)/(1<<20)),
		},
		Gates: gates}
	e.add(r)
	return nil
}
