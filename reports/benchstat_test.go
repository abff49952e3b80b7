package reports

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
	"golang.org/x/perf/benchproc"
	legacy "golang.org/x/perf/benchstat"
)

// abPair builds a base and a new document from known samples: a clear
// slowdown, no change, an improvement of a higher-is-better metric, a
// change too small to matter, ties, and a result with too few samples.
func abPair() (base, new *Document) {
	rng := rand.New(rand.NewPCG(7, 7))
	env := Env{"host": "gpu-a", "gpu": "NVIDIA H200", "cores": "16"}
	mk := func() *Document {
		return &Document{Format: results.Format, Schema: results.SchemaVersion, Suite: "bench moe", Start: t0, End: t0, Env: env}
	}
	base, new = mk(), mk()
	type row struct {
		name           string
		params         Params
		metric, unit   string
		better         Direction
		n              int
		bcenter, ratio float64
		noise          float64
	}
	rows := []row{
		{"moe", Params{"batch": "1"}, "latency", "us", LowerIsBetter, 10, 52, 1.10, 0.01},
		{"moe", Params{"batch": "1"}, "p99", "us", LowerIsBetter, 10, 60, 1.00, 0.01},
		{"moe", Params{"batch": "64"}, "latency", "us", LowerIsBetter, 12, 310, 1.00, 0.01},
		{"moe", Params{"batch": "64"}, "tflops", "TFLOP/s", HigherIsBetter, 12, 400, 1.05, 0.005},
		{"moe", Params{"batch": "256"}, "latency", "us", LowerIsBetter, 10, 1200, 1.02, 0.002},
		{"arena copy", Params{"size": "1 MiB", "dir": "h2d"}, "bandwidth", "MB/s", HigherIsBetter, 8, 55000, 0.97, 0.004},
		{"few", nil, "latency", "us", LowerIsBetter, 3, 10, 1.5, 0.01},
	}
	add := func(d *Document, r row, center float64) {
		res := Result{Name: r.name, Params: r.params}
		i := -1
		for j := range d.Results {
			if d.Results[j].Key() == res.Key() {
				i = j
			}
		}
		if i < 0 {
			d.Results = append(d.Results, res)
			i = len(d.Results) - 1
		}
		d.Results[i].Metrics = append(d.Results[i].Metrics, Metric{Name: r.metric, Unit: r.unit, Better: r.better, Samples: noisy(rng, r.n, center, r.noise)})
	}
	for _, r := range rows {
		add(base, r, r.bcenter)
		add(new, r, r.bcenter*r.ratio)
	}
	// Ties: the same values on both sides, partly.
	tie := Result{Name: "ties", Metrics: []Metric{{Name: "latency", Unit: "us", Better: LowerIsBetter, Samples: []float64{5, 5, 5, 6, 6, 6, 7, 7}}}}
	base.Results = append(base.Results, tie)
	tie2 := tie
	tie2.Metrics = []Metric{{Name: "latency", Unit: "us", Better: LowerIsBetter, Samples: []float64{6, 6, 6, 7, 7, 7, 7, 8}}}
	new.Results = append(new.Results, tie2)
	return base, new
}

// benchstatP runs exported Go benchmark files through the pieces
// cmd/benchstat is made of (benchfmt.Files, benchproc projections .config
// with units, .fullname rows, .file columns, the units' assumption from
// their metadata) and returns, per "fullname unit", the comparison of the
// second file against the first.
func benchstatP(t *testing.T, basePath, newPath string) map[string]benchmath.Comparison {
	t.Helper()
	filter, err := benchproc.NewFilter("*")
	if err != nil {
		t.Fatal(err)
	}
	var parser benchproc.ProjectionParser
	tableBy, unitField, err := parser.ParseWithUnit(".config", filter)
	if err != nil {
		t.Fatal(err)
	}
	rowBy, err := parser.Parse(".fullname", filter)
	if err != nil {
		t.Fatal(err)
	}
	colBy, err := parser.Parse(".file", filter)
	if err != nil {
		t.Fatal(err)
	}
	type cellKey struct{ table, row, col benchproc.Key }
	cells := map[cellKey][]float64{}
	files := benchfmt.Files{Paths: []string{basePath, newPath}}
	var cols []benchproc.Key
	for files.Scan() {
		switch rec := files.Result().(type) {
		case *benchfmt.SyntaxError:
			t.Fatalf("benchfmt rejects the export: %v", rec)
		case *benchfmt.Result:
			col := colBy.Project(rec)
			if len(cols) == 0 || cols[len(cols)-1] != col {
				cols = append(cols, col)
			}
			for i, tk := range tableBy.ProjectValues(rec) {
				k := cellKey{tk, rowBy.Project(rec), col}
				cells[k] = append(cells[k], rec.Values[i].Value)
			}
		}
	}
	if err := files.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cols) != 2 {
		t.Fatalf("benchfmt saw %d files, want 2", len(cols))
	}
	units := benchfmt.UnitMetadataMap(files.Units())
	thr := benchmath.DefaultThresholds
	out := map[string]benchmath.Comparison{}
	for k, baseVals := range cells {
		if k.col != cols[0] {
			continue
		}
		newVals, ok := cells[cellKey{k.table, k.row, cols[1]}]
		if !ok {
			continue
		}
		unit := k.table.Get(unitField)
		a := units.GetAssumption(unit)
		cmp := a.Compare(benchmath.NewSample(baseVals, &thr), benchmath.NewSample(newVals, &thr))
		out[k.row.StringValues()+" "+unit] = cmp
	}
	return out
}

func exportFile(t *testing.T, dir, name string, d *Document) string {
	t.Helper()
	var b bytes.Buffer
	if err := ExportGoBench(&b, []*Document{d}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDiffAgreesWithBenchstat checks Diff against benchstat on the same
// samples: exported through ExportGoBench and read back by benchfmt, the
// p-values and the significant/"~" decisions are the same, and the old
// benchstat library (its own U-test implementation) agrees to the three
// decimals it prints.
func TestDiffAgreesWithBenchstat(t *testing.T) {
	base, new := abPair()
	c := Diff([]*Document{base}, []*Document{new}, DiffOptions{Threshold: 5})
	dir := t.TempDir()
	bp, np := exportFile(t, dir, "base.txt", base), exportFile(t, dir, "new.txt", new)
	bs := benchstatP(t, bp, np)

	// What Diff calls each metric in benchstat's terms.
	fullname := func(m MetricDiff) string {
		for _, r := range base.Results {
			if r.Key() == m.Key {
				return strings.TrimPrefix(GoBenchName(&r), "Benchmark")
			}
		}
		t.Fatalf("no result %s", m.Key)
		return ""
	}
	unitOf := func(m MetricDiff) string {
		u := GoBenchUnit(Metric{Name: m.Metric, Unit: m.Unit})
		_, tidy := benchfmtTidy(u)
		return tidy
	}
	if len(bs) != len(c.Metrics) {
		t.Errorf("benchstat compared %d metrics, Diff %d", len(bs), len(c.Metrics))
	}
	sig := 0
	for _, m := range c.Metrics {
		k := fullname(m) + " " + unitOf(m)
		got, ok := bs[k]
		if !ok {
			t.Errorf("benchstat has no %q (has %v)", k, keysOf(bs))
			continue
		}
		if got.P != m.P {
			t.Errorf("%s %s: p = %v, benchstat %v", m.Key, m.Metric, m.P, got.P)
		}
		bsSig := got.FormatDelta(m.Base.Median, m.New.Median) != "~"
		if bsSig != m.Significant {
			t.Errorf("%s %s: significant = %v, benchstat %v (p=%v)", m.Key, m.Metric, m.Significant, bsSig, got.P)
		}
		if m.Significant {
			sig++
		}
		if got.N1 != m.Base.N || got.N2 != m.New.N {
			t.Errorf("%s %s: n = %d+%d, benchstat %d+%d", m.Key, m.Metric, m.Base.N, m.New.N, got.N1, got.N2)
		}
	}
	if sig == 0 || sig == len(c.Metrics) {
		t.Errorf("%d of %d metrics significant: the fixture must have both kinds", sig, len(c.Metrics))
	}

	// The old benchstat library: independent U-test code, means without
	// outliers for the delta; its note is "(p=0.000 n=10+10)".
	var col legacy.Collection
	for _, p := range []string{bp, np} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := col.AddFile(filepath.Base(p), f); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	note := regexp.MustCompile(`^\(p=([0-9.]+) n=(\d+)\+(\d+)\)$`)
	checked := 0
	for _, tab := range col.Tables() {
		for _, row := range tab.Rows {
			if row.Benchmark == "[Geomean]" {
				continue
			}
			var m *MetricDiff
			for i := range c.Metrics {
				mm := c.Metrics[i]
				if strings.TrimPrefix(GoBenchName(&Result{Name: nameOf(base, mm.Key), Params: paramsOf(base, mm.Key)}), "Benchmark") == row.Benchmark &&
					strings.Replace(GoBenchUnit(Metric{Name: mm.Metric, Unit: mm.Unit}), "-MB/s", "-speed", 1) == tab.Metric {
					m = &c.Metrics[i]
				}
			}
			if m == nil {
				t.Errorf("old benchstat row %s %s matches no metric", row.Benchmark, tab.Metric)
				continue
			}
			g := note.FindStringSubmatch(row.Note)
			if g == nil {
				t.Errorf("%s %s: old benchstat note %q", m.Key, m.Metric, row.Note)
				continue
			}
			if n1, _ := strconv.Atoi(g[2]); n1 != m.Base.N {
				continue // it dropped outliers: a different test; skip
			}
			if n2, _ := strconv.Atoi(g[3]); n2 != m.New.N {
				continue
			}
			if want := fmt.Sprintf("%0.3f", m.P); g[1] != want {
				t.Errorf("%s %s: old benchstat p=%s, Diff p=%s", m.Key, m.Metric, g[1], want)
			}
			if (row.Delta != "~") != m.Significant {
				t.Errorf("%s %s: old benchstat delta %q, Diff significant=%v", m.Key, m.Metric, row.Delta, m.Significant)
			}
			checked++
		}
	}
	t.Logf("%d metrics, %d significant, %d checked against the old benchstat", len(c.Metrics), sig, checked)
	if checked < len(c.Metrics)/2 {
		t.Errorf("only %d of %d metrics checked against the old benchstat", checked, len(c.Metrics))
	}
}

func benchfmtTidy(unit string) (float64, string) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "BenchmarkX 1 1 %s\n", unit)
	r := benchfmt.NewReader(&b, "x")
	for r.Scan() {
		if res, ok := r.Result().(*benchfmt.Result); ok {
			return res.Values[0].Value, res.Values[0].Unit
		}
	}
	return math.NaN(), unit
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func nameOf(d *Document, key string) string {
	for _, r := range d.Results {
		if r.Key() == key {
			return r.Name
		}
	}
	return ""
}

func paramsOf(d *Document, key string) Params {
	for _, r := range d.Results {
		if r.Key() == key {
			return r.Params
		}
	}
	return nil
}
