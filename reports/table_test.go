package reports

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

func twoMachines() []*Document {
	a, b := fixture("gpu-a", 1), fixture("gpu-b", 2)
	b.Results = b.Results[:2]
	return []*Document{a, b}
}

func TestRenderGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format string
		opt    TableOptions
	}{
		{"show.txt", FormatText, TableOptions{}},
		{"show.md", FormatMarkdown, TableOptions{}},
		{"show.csv", FormatCSV, TableOptions{}},
		{"show.json", FormatJSON, TableOptions{}},
		{"show-selected.txt", FormatText, TableOptions{Params: []string{"model", "batch"}, Metrics: []string{"tflops", "latency"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Render(&b, twoMachines(), tc.format, tc.opt); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".golden", b.Bytes())
		})
	}
}

func TestRenderProperties(t *testing.T) {
	docs := twoMachines()
	var text bytes.Buffer
	if err := Render(&text, docs, FormatText, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{
		"gpu: NVIDIA H200\n", // shared environment once, at the top
		"host: gpu-a\n",      // then what tells each table apart
		"host: gpu-b\n",
		"unmeasured",
		"FAIL moe/batch=64/model=qwen3-30b-a3b: correctness: rel L2 3.2e-02 > 1e-02",
		"unmeasured moe/batch=64/model=qwen3-30b-a3b: tflops: no GPU: cuBLAS not found",
		"±∞",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "gpu: NVIDIA H200"); n != 1 {
		t.Errorf("shared environment printed %d times, want once", n)
	}

	// The unmeasured metric must never read as a number.
	var c bytes.Buffer
	if err := Render(&c, docs, FormatCSV, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&c).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := -1
	for i, h := range recs[0] {
		if h == "tflops (TFLOP/s) median" {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("no tflops median column in %q", recs[0])
	}
	if got := recs[2][col]; got != "unmeasured" {
		t.Errorf("unmeasured tflops in CSV = %q, want \"unmeasured\"", got)
	}
	if len(recs) != 1+4+2 {
		t.Errorf("CSV has %d records, want header + 6 rows", len(recs))
	}

	var j bytes.Buffer
	if err := Render(&j, docs, FormatJSON, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	var tables []jsonTable
	if err := json.Unmarshal(j.Bytes(), &tables); err != nil {
		t.Fatal(err)
	}
	if len(tables) != 3 || tables[0].Env["host"] != "gpu-a" { // gpu-a: moe and sweep; gpu-b: moe
		t.Fatalf("JSON tables: %d, first env %v", len(tables), tables[0].Env)
	}
	m := tables[0].Rows[1].Metrics[1]
	if m.Unmeasured == "" || m.Median != nil {
		t.Errorf("unmeasured metric in JSON: %+v", m)
	}
	if few := tables[0].Rows[2].Metrics[0]; few.Lo != nil || few.Hi != nil || few.N != 3 {
		t.Errorf("3-sample metric in JSON: lo %v hi %v n %d, want no interval (null)", few.Lo, few.Hi, few.N)
	}
}

func TestRenderSelection(t *testing.T) {
	docs := twoMachines()
	for _, tc := range []struct {
		name    string
		opt     TableOptions
		wantErr string
		header  []string // of the first table: the first result name's
	}{
		{"all", TableOptions{}, "", []string{"name", "batch", "model", "latency (us)", "tflops (TFLOP/s)", "correctness"}},
		{"ordered", TableOptions{Params: []string{"size", "batch"}, Metrics: []string{"bandwidth", "latency"}}, "", []string{"name", "batch", "latency (us)", "correctness"}},
		{"no params", TableOptions{Params: []string{}}, "", []string{"name", "latency (us)", "tflops (TFLOP/s)", "correctness"}},
		{"unknown metric", TableOptions{Metrics: []string{"latencyy"}}, `no metric named "latencyy" (have: bandwidth, latency, tflops)`, nil},
		{"unknown param", TableOptions{Params: []string{"bs"}}, `no parameter named "bs" (have: batch, dir, model, size)`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tables, err := Tables(docs, tc.opt)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tables[0].header(); strings.Join(got, "|") != strings.Join(tc.header, "|") {
				t.Errorf("header (-want +got):\n-%q\n+%q", tc.header, got)
			}
		})
	}
}

func TestRenderMergedGroupsByEnvironment(t *testing.T) {
	m, err := Merge(twoMachines()...)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := Tables([]*Document{m}, TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// One table per (host, result name); each table's rows share both.
	rowsPerHost := map[string]int{}
	for _, tab := range tables {
		for _, r := range tab.Rows {
			if r.Name != tab.Rows[0].Name {
				t.Errorf("table on %s mixes results %q and %q", tab.Env["host"], tab.Rows[0].Name, r.Name)
			}
		}
		rowsPerHost[tab.Env["host"]] += len(tab.Rows)
	}
	if len(rowsPerHost) != 2 || rowsPerHost["gpu-b"] != 2 || tables[0].Env["host"] != "gpu-a" {
		t.Errorf("merged document: rows per host %v, want gpu-a first and 2 rows on gpu-b", rowsPerHost)
	}
	var a, b bytes.Buffer
	if err := Render(&a, twoMachines(), FormatText, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Render(&b, []*Document{m}, FormatText, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("merged document renders differently from its parts (-parts +merged):\n%s", lineDiff(a.String(), b.String()))
	}
}

func TestFormatValue(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {1, "1"}, {12.345678, "12.35"}, {1234.5, "1234"}, {9999.7, "10000"}, {123456.7, "123457"},
		{0.0123456, "0.01235"}, {0.00012345, "1.234e-04"}, {-52.01, "-52.01"}, {2e15, "2.000e+15"},
	} {
		if got := FormatValue(tc.v); got != tc.want {
			t.Errorf("FormatValue(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestRenderUnknownFormat(t *testing.T) {
	err := Render(&bytes.Buffer{}, twoMachines(), "html", TableOptions{})
	if err == nil || !strings.Contains(err.Error(), `unknown table format "html"`) {
		t.Errorf("error %v", err)
	}
}

// Samples that are all alike (a count of wrong copies, say) show as a value:
// an interval of ±∞ from too few samples would only be noise there.
func TestRenderConstantSamples(t *testing.T) {
	d := &Document{Format: results.Format, Schema: results.SchemaVersion, Suite: "arena sweep", Env: Env{"host": "h"},
		Results: []Result{{Name: "copy", Params: Params{"size": "4096"}, Metrics: []Metric{
			{Name: "wrong", Unit: "copies", Better: LowerIsBetter, Samples: []float64{0, 0, 0}},
			{Name: "bandwidth", Unit: "GB/s", Better: HigherIsBetter, Samples: []float64{1, 2, 3}},
		}}}}
	var b bytes.Buffer
	if err := Render(&b, []*Document{d}, FormatText, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "│ 0 ") || strings.Contains(out, "0 ±∞") {
		t.Errorf("constant samples not shown as a plain value:\n%s", out)
	}
	if !strings.Contains(out, "2 ±∞") {
		t.Errorf("varying samples lost their interval:\n%s", out)
	}
}
