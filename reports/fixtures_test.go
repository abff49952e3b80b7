package reports

import (
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/reports/results"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs (-want +got):\n%s", path, lineDiff(string(want), string(got)))
	}
}

// lineDiff is a minimal line diff for failure messages.
func lineDiff(want, got string) string {
	w, g := splitLines(want), splitLines(got)
	var out string
	for i := 0; i < len(w) || i < len(g); i++ {
		switch {
		case i >= len(w):
			out += "+" + g[i] + "\n"
		case i >= len(g):
			out += "-" + w[i] + "\n"
		case w[i] != g[i]:
			out += "-" + w[i] + "\n+" + g[i] + "\n"
		}
	}
	return out
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// noisy returns n samples around center with relative noise (seeded).
func noisy(rng *rand.Rand, n int, center, noise float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Round(center*(1+noise*rng.NormFloat64())*1000) / 1000
	}
	return out
}

// fixture is a document exercising every column kind: parameters, measured
// and unmeasured metrics, passing and failing gates, few samples, warnings.
func fixture(host string, seed uint64) *Document {
	rng := rand.New(rand.NewPCG(seed, 1))
	d := &Document{
		Format: results.Format, Schema: results.SchemaVersion, Suite: "bench moe",
		Command: []string{"mstar", "bench", "moe", "--out", "r.json"},
		Start:   t0, End: t0.Add(time.Minute),
		Env: Env{"host": host, "gpu": "NVIDIA H200", "cores": "16", "go": "go1.26.8"},
	}
	d.Results = []Result{
		{
			Name:   "moe",
			Params: Params{"batch": "1", "model": "qwen3-30b-a3b"},
			Metrics: []Metric{
				{Name: "latency", Unit: "us", Better: LowerIsBetter, Samples: noisy(rng, 10, 52, 0.01)},
				{Name: "tflops", Unit: "TFLOP/s", Better: HigherIsBetter, Samples: noisy(rng, 10, 12.5, 0.02)},
			},
			Gates: []Gate{{Name: "correctness", Pass: true, Reason: "rel L2 1.1e-03 <= 1e-02"}},
		},
		{
			Name:   "moe",
			Params: Params{"batch": "64", "model": "qwen3-30b-a3b"},
			Metrics: []Metric{
				{Name: "latency", Unit: "us", Better: LowerIsBetter, Samples: noisy(rng, 10, 310, 0.01)},
				{Name: "tflops", Unit: "TFLOP/s", Better: HigherIsBetter, Unmeasured: "no GPU: cuBLAS not found"},
			},
			Gates: []Gate{{Name: "correctness", Pass: false, Reason: "rel L2 3.2e-02 > 1e-02"}},
		},
		{
			Name:     "moe",
			Params:   Params{"batch": "256", "model": "qwen3-30b-a3b"},
			Metrics:  []Metric{{Name: "latency", Unit: "us", Better: LowerIsBetter, Samples: noisy(rng, 3, 1200, 0.01)}},
			Warnings: []string{"only 3 samples: time budget reached"},
		},
		{
			Name:    "arena copy",
			Params:  Params{"size": "1MiB", "dir": "h2d"},
			Metrics: []Metric{{Name: "bandwidth", Unit: "GB/s", Better: HigherIsBetter, Samples: noisy(rng, 8, 21, 0.03)}},
		},
	}
	return d
}

func nan() float64 { return math.NaN() }
