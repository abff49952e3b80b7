package moe

import (
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu/gputest"
	"github.com/mstar-dev/mstar/reports/results"
)

// TestCUDAProgrammaticSpeedProbe measures what programmatic dependent
// launch gives a pass: for each shipped shape and batch, the shipped
// configuration with plain launches and with both GEMMs' pl=1, on one set
// of weights, timed in turn (three rounds each, alternated). The same
// weights on both sides matter: a new weight allocation alone moves a
// small-M time by up to 5% (TestCUDAPlacementSpeedProbe), more than the
// launches can give. It asserts that both launch modes compute the same
// output; the times are logged. MSTAR_MOE_PDL_PROBE=1 runs it (`accept-h200.sh pdl`, ~1–2 minutes on
// the H200; MSTAR_MOE_PDL_BATCH=1,8 narrows the batches).
func TestCUDAProgrammaticSpeedProbe(t *testing.T) {
	if os.Getenv("MSTAR_MOE_PDL_PROBE") == "" {
		t.Skip("set MSTAR_MOE_PDL_PROBE=1 to time plain against programmatic launches")
	}
	dev := gputest.OpenCUDA(t)
	batches := shippedBatches
	if b := os.Getenv("MSTAR_MOE_PDL_BATCH"); b != "" {
		batches = nil
		for _, f := range strings.Split(b, ",") {
			m, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("MSTAR_MOE_PDL_BATCH: %v", err)
			}
			batches = append(batches, m)
		}
	}
	const rounds, samples = 3, 20
	for _, s := range shippedShapes {
		// The shipped file's picks, whatever moe.cu version it names.
		b, err := fs.ReadFile(ShippedConfigs(), "configs/"+KeyFor(s.shape, shippedDevice).FileName())
		if err != nil {
			t.Fatal(err)
		}
		f, err := ParseTunedFile(b, s.name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := NewRunner(dev, NewLayer(s.shape, 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !g.ProgrammaticLaunch() {
			g.Close()
			t.Skip("this GPU or driver has no programmatic dependent launch")
		}
		var sumPlain, sumPDL float64
		for _, m := range batches {
			picked := f.PickFor(s.shape, m, Uniform).Config
			modes := []Config{picked.WithProgrammatic(false, false), picked.WithProgrammatic(true, true)}
			x, r := RandomInput(m, s.shape.H, 2), UniformRouting(m, s.shape.E, s.shape.K, 1)
			var outs [2][]float32
			var plans [2]*Plan
			for i, c := range modes {
				p, out, err := g.CheckedPass(x, r, c)
				if err != nil {
					t.Fatalf("%s M=%d %v: %v", s.name, m, c, err)
				}
				plans[i], outs[i] = p, out
			}
			if !slices.Equal(outs[0], outs[1]) {
				t.Errorf("%s M=%d %v: programmatic launches changed the output", s.name, m, modes[1])
			}
			var times [2][]float64
			for range rounds {
				for i, p := range plans {
					us, _, err := g.Time(p, r, samples)
					if err != nil {
						t.Fatal(err)
					}
					times[i] = append(times[i], results.Median(us))
				}
			}
			for _, p := range plans {
				if err := p.Free(); err != nil {
					t.Fatal(err)
				}
			}
			plain, pdl := results.Median(times[0]), results.Median(times[1])
			sumPlain, sumPDL = sumPlain+plain, sumPDL+pdl
			t.Logf("pdl %-18s M=%-4d plain %8.1f µs (%s)  programmatic %8.1f µs (%s)  %+6.2f µs %+5.1f%%  %v",
				s.name, m, plain, formatLevels(times[0]), pdl, formatLevels(times[1]), pdl-plain, 100*(pdl-plain)/plain, modes[0])
		}
		t.Logf("pdl %s: sum over the batches %.1f → %.1f µs", s.name, sumPlain, sumPDL)
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
