package reports

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/reports/results"
)

// bench moe --peers writes the peers' rows into the same document: mstar's
// table keeps mstar's rows, and the peers' comparison follows it, so the
// live run and 'report show --run' print both the same way.
func TestMoETablePeers(t *testing.T) {
	row := func(impl, batch string, lat ...float64) Result {
		return Result{Name: "moe", Params: Params{"impl": impl, "batch": batch, "model": "m1"},
			Metrics: []Metric{{Name: "latency", Unit: "µs", Better: results.LowerIsBetter, Samples: lat}},
			Gates:   []Gate{{Name: "correctness", Pass: true}}}
	}
	d := &Document{Suite: "bench moe", Env: Env{"device": "cuda:0", "gpu": "H200"}, Results: []Result{
		row("mstar", "1", 10, 10, 10), row("mstar", "8", 40, 40, 40), row("triton-ref", "1", 12, 12, 12), row("triton-ref", "8", 38, 38, 38),
	}}
	var b bytes.Buffer
	if err := RunTable(&b, d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	mstar, peered, ok := strings.Cut(out, "# mstar against its peers")
	if !ok {
		t.Fatalf("no peers' comparison:\n%s", out)
	}
	if strings.Contains(mstar, "12.0") || strings.Contains(mstar, "38.0") || strings.Count(mstar, "# M=") != 2 {
		t.Errorf("the peers' rows are in mstar's table:\n%s", mstar)
	}
	if !strings.Contains(peered, "triton-ref us") || !strings.Contains(peered, "1.20×") || !strings.Contains(peered, "0.95×") {
		t.Errorf("peers' comparison:\n%s", peered)
	}
	// Without peers there is no comparison.
	d.Results = d.Results[:2]
	b.Reset()
	if err := RunTable(&b, d); err != nil || strings.Contains(b.String(), "peers") {
		t.Errorf("a run without peers: %v\n%s", err, b.String())
	}
}

// A merged document of two routings prints a table per routing, each row
// under its own header and each with its own run's ceilings; a document of
// one routing (a run, or its shards merged) stays one table.
func TestMoETableMergedRuns(t *testing.T) {
	row := func(run, routing, batch string, lat float64) Result {
		return Result{Name: "moe", Run: run, Params: Params{"batch": batch, "model": "m1", "routing": routing, "seed": "1"},
			Metrics: []Metric{{Name: "latency", Unit: "µs", Better: results.LowerIsBetter, Samples: []float64{lat, lat, lat}}},
			Gates:   []Gate{{Name: "correctness", Pass: true}}}
	}
	ceil := func(run string, gbs float64) Result {
		return Result{Name: "ceiling", Run: run, Role: results.RoleContext, Params: Params{"what": "read"},
			Metrics: []Metric{{Name: "bandwidth", Unit: "GB/s", Better: results.HigherIsBetter, Samples: []float64{gbs}}}}
	}
	d := &Document{Suite: "bench moe", Env: Env{"device": "cpu"}, Warnings: []string{"merged 2 documents"}, Results: []Result{
		row("a", "uniform", "1", 11), row("b", "zipf:1.2", "64", 640), row("a", "uniform", "16", 160), ceil("a", 50), ceil("b", 70),
	}}
	var b bytes.Buffer
	if err := RunTable(&b, d); err != nil {
		t.Fatal(err)
	}
	first, second, ok := strings.Cut(b.String(), "\n\n")
	if !ok {
		t.Fatalf("one table for two routings:\n%s", b.String())
	}
	if !strings.Contains(first, "routing uniform") || !strings.Contains(first, "160.0") || strings.Contains(first, "640.0") ||
		!strings.Contains(first, "read 50 GB/s") || !strings.Contains(first, "merged 2 documents") {
		t.Errorf("the uniform run's table:\n%s", first)
	}
	if !strings.Contains(second, "routing zipf:1.2") || !strings.Contains(second, "640.0") || strings.Contains(second, "160.0") ||
		!strings.Contains(second, "read 70 GB/s") || strings.Contains(second, "merged") {
		t.Errorf("the zipf run's table:\n%s", second)
	}
	d.Results[1].Params["routing"] = "uniform" // one routing: one table
	b.Reset()
	if err := RunTable(&b, d); err != nil || strings.Count(b.String(), "# routing") != 1 {
		t.Errorf("one routing, several tables: %v\n%s", err, b.String())
	}
}

// The run tables of real documents, GPU ones with long kernel names and
// methods among them, fit TextWidth columns.
func TestRunTablesFitWidth(t *testing.T) {
	for _, path := range []string{
		"measured/h200/moe-qwen3-30b-a3b.json",
		"measured/h100/moe-v36/ab-q30/a.json.gz", // --stages
		"measured/h200/ceilings.json",
		"measured/h200/arena-sweep.json",
		"measured/arena/stress-30s-kill1pct.json.gz",
		"measured/h200/moe-final-a/tune/docs/tune-mixtral-8x7b.json.gz",
	} {
		d, err := results.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := RunTable(&b, d); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, l := range strings.Split(b.String(), "\n") {
			if n := utf8.RuneCountInString(l); n > TextWidth {
				t.Errorf("%s: a line of %d columns: %q", path, n, l)
			}
		}
	}
}
