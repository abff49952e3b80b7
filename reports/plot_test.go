package reports

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// sweep is a batch sweep of two models on one machine.
func sweep(host string) *Document {
	d := &Document{Format: results.Format, Schema: results.SchemaVersion, Suite: "bench moe", Start: t0, End: t0, Env: Env{"host": host}}
	for _, model := range []string{"small", "large"} {
		for _, batch := range []string{"64", "1", "16"} {
			base := map[string]float64{"1": 10, "16": 20, "64": 40}[batch]
			if model == "large" {
				base *= 3
			}
			d.Results = append(d.Results, Result{Name: "moe", Params: Params{"batch": batch, "model": model},
				Metrics: []Metric{{Name: "latency", Unit: "us", Better: LowerIsBetter,
					Samples: []float64{base, base * 1.01, base * 0.99, base, base * 1.02, base * 0.98}}}})
		}
	}
	return d
}

func TestPlotSeries(t *testing.T) {
	series, unit, warn, err := PlotSeries([]*Document{sweep("a")}, PlotOptions{Metric: "latency", X: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	if unit != "us" || len(warn) != 0 {
		t.Errorf("unit %q warnings %q", unit, warn)
	}
	if len(series) != 2 || series[0].Label != "moe/model=small" || series[1].Label != "moe/model=large" {
		t.Fatalf("series %+v", series)
	}
	var xs, ys []float64
	for _, p := range series[1].Points {
		xs, ys = append(xs, p.X), append(ys, p.Median)
	}
	if want := []float64{1, 16, 64}; !equalFloats(xs, want) {
		t.Errorf("x %v, want %v (sorted)", xs, want)
	}
	if want := []float64{30, 60, 120}; !equalFloats(ys, want) {
		t.Errorf("medians %v, want %v", ys, want)
	}
	if p := series[0].Points[0]; !(p.Lo < p.Median && p.Median < p.Hi) {
		t.Errorf("no CI around %+v", p)
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPlotSeriesOptions(t *testing.T) {
	two := []*Document{sweep("a"), sweep("b")}
	unmeasured := sweep("a")
	unmeasured.Results[0].Metrics[0] = Metric{Name: "latency", Unit: "us", Better: LowerIsBetter, Unmeasured: "timeout"}
	badX := sweep("a")
	badX.Results[0].Params["batch"] = "lots"
	for _, tc := range []struct {
		name    string
		docs    []*Document
		opt     PlotOptions
		labels  []string
		points  int // in the first series
		warn    string
		wantErr string
	}{
		{"series by param", two[:1], PlotOptions{Metric: "latency", X: "batch", Series: "model"}, []string{"model=small", "model=large"}, 3, "", ""},
		{"where", two[:1], PlotOptions{Metric: "latency", X: "batch", Where: Params{"model": "large"}}, []string{"moe/model=large"}, 3, "", ""},
		{"two files told apart by environment", two, PlotOptions{Metric: "latency", X: "batch", Series: "model", Labels: []string{"a.json", "b.json"}},
			[]string{"model=small host=a", "model=large host=a", "model=small host=b", "model=large host=b"}, 3, "", ""},
		{"two files alike are labelled", []*Document{sweep("a"), sweep("a")}, PlotOptions{Metric: "latency", X: "batch", Series: "model", Labels: []string{"a.json", "b.json"}},
			[]string{"a.json model=small", "a.json model=large", "b.json model=small", "b.json model=large"}, 3, "", ""},
		{"unmeasured left out", []*Document{unmeasured}, PlotOptions{Metric: "latency", X: "batch", Series: "model"}, []string{"model=small", "model=large"}, 2, "unmeasured (timeout): left out", ""},
		{"x not numeric", two[:1], PlotOptions{Metric: "latency", X: "model", Series: "model"}, nil, 0, "", `parameter model="small" is not a number`},
		{"series parameter missing", two[:1], PlotOptions{Metric: "latency", X: "batch", Series: "none"}, nil, 0, "", "--series none left nothing: none of the 6 results with latency and batch has parameter none (theirs: batch, model)"},
		{"where value absent", two[:1], PlotOptions{Metric: "latency", X: "batch", Where: Params{"model": "huge"}}, nil, 0, "", "--where model=huge left nothing: the 6 results with latency and batch have model=large, small"},
		{"where parameter absent", two[:1], PlotOptions{Metric: "latency", X: "batch", Where: Params{"dir": "h2d"}}, nil, 0, "", "--where dir=h2d left nothing: none of the 6 results with latency and batch has parameter dir (theirs: batch, model)"},
		{"log x", two[:1], PlotOptions{Metric: "latency", X: "batch", LogX: true, Title: "t"}, []string{"moe/model=small", "moe/model=large"}, 3, "", ""},
		{"not a number", []*Document{badX}, PlotOptions{Metric: "latency", X: "batch"}, nil, 0, "", `parameter batch="lots" is not a number`},
		{"no metric", two[:1], PlotOptions{Metric: "tflops", X: "batch"}, nil, 0, "", `no result has parameter "batch" and metric "tflops"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			series, _, warn, err := PlotSeries(tc.docs, tc.opt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var labels []string
			for _, s := range series {
				labels = append(labels, s.Label)
			}
			if strings.Join(labels, "|") != strings.Join(tc.labels, "|") {
				t.Errorf("labels (-want +got):\n-%q\n+%q", tc.labels, labels)
			}
			if len(series[0].Points) != tc.points {
				t.Errorf("%d points, want %d", len(series[0].Points), tc.points)
			}
			if tc.warn != "" && (len(warn) != 1 || !strings.Contains(warn[0], tc.warn)) {
				t.Errorf("warnings %q, want %q", warn, tc.warn)
			}
		})
	}
	// Two results at the same x of one series.
	dup := sweep("a")
	dup.Results = append(dup.Results, dup.Results[0])
	if _, _, _, err := PlotSeries([]*Document{dup}, PlotOptions{Metric: "latency", X: "batch"}); err == nil || !strings.Contains(err.Error(), "several results at batch=64") {
		t.Errorf("duplicate x: %v", err)
	}
}

func TestPlotFile(t *testing.T) {
	dir := t.TempDir()
	docs := []*Document{sweep("a")}
	for _, tc := range []struct {
		file  string
		magic string
	}{{"p.png", "\x89PNG"}, {"p.svg", "<?xml"}, {"P.SVG", "<?xml"}} {
		path := filepath.Join(dir, tc.file)
		if _, err := PlotFile(path, docs, PlotOptions{Metric: "latency", X: "batch", LogX: true, LogY: true}); err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(tc.magic)) {
			t.Errorf("%s starts %q, want %q", tc.file, b[:min(8, len(b))], tc.magic)
		}
		if tc.magic == "<?xml" && !bytes.Contains(b, []byte("moe/model=large")) {
			t.Errorf("%s has no legend entry", tc.file)
		}
	}
	if _, err := PlotFile(filepath.Join(dir, "p.gif"), docs, PlotOptions{Metric: "latency", X: "batch"}); err == nil || !strings.Contains(err.Error(), "want .png or .svg") {
		t.Errorf("gif: %v", err)
	}
	zero := sweep("a")
	zero.Results[0].Params["batch"] = "0"
	if _, err := PlotFile(filepath.Join(dir, "z.png"), []*Document{zero}, PlotOptions{Metric: "latency", X: "batch", LogX: true}); err == nil || !strings.Contains(err.Error(), "log axis") {
		t.Errorf("zero on a log axis: %v", err)
	}
}

// An interval reaching 0 on a log y axis is drawn cut short, never a panic.
func TestPlotLogYIntervalReachingZero(t *testing.T) {
	d := sweep("a")
	d.Results[0].Metrics[0].Samples = []float64{0, 0, 0, 5, 5, 5, 5, 5, 5}
	var b bytes.Buffer
	if _, err := Plot(&b, "png", []*Document{d}, PlotOptions{Metric: "latency", X: "batch", LogY: true}); err != nil {
		t.Fatalf("log-y plot with an interval down to 0: %v", err)
	}
	if b.Len() == 0 {
		t.Error("no image written")
	}
}
