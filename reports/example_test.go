package reports_test

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mstar-dev/mstar/reports"
)

func ExampleSummarize() {
	s := reports.Summarize([]float64{52.1, 51.9, 52.4, 52.0, 51.8, 52.2, 52.3, 51.7})
	fmt.Printf("median %.2f, 95%% CI [%.1f, %.1f], n=%d, ±%.1f%%\n", s.Median, s.Lo, s.Hi, s.N, s.HalfWidthPct())
	// Output: median 52.05, 95% CI [51.7, 52.3], n=8, ±0.7%
}

func doc(samples ...float64) *reports.Document {
	d := reports.NewDocument("bench moe", []string{"mstar", "bench", "moe"}, reports.Env{"host": "gpu-a"})
	d.Results = []reports.Result{{
		Name:    "moe",
		Params:  reports.Params{"batch": "64"},
		Metrics: []reports.Metric{{Name: "latency", Unit: "us", Better: reports.LowerIsBetter, Samples: samples}},
	}}
	return d
}

func ExampleDiff() {
	base := doc(100, 101, 99, 100, 102, 98, 100, 101)
	slower := doc(110, 111, 109, 110, 112, 108, 110, 111)
	c := reports.Diff([]*reports.Document{base}, []*reports.Document{slower}, reports.DiffOptions{Threshold: 5})
	for _, m := range c.Metrics {
		fmt.Printf("%s %s: %s\n", m.Key, m.Metric, m.Verdict(c.Options))
	}
	fmt.Println(len(c.Regressions()), "regression(s)")
	// Output:
	// moe/batch=64 latency: REGRESSION: +10.00% worse, p=0.000, n=8+8, threshold 5%
	// 1 regression(s)
}

func ExampleExportGoBench() {
	d := doc(100, 101)
	if err := reports.ExportGoBench(os.Stdout, []*reports.Document{d}); err != nil {
		fmt.Println(err)
	}
	// Output:
	// host: gpu-a
	// Unit latency-us better=lower
	// BenchmarkMoe/batch=64-1 1 100 latency-us
	// BenchmarkMoe/batch=64-1 1 101 latency-us
}

func ExampleNewStreamWriter() {
	var out strings.Builder
	d := reports.NewDocument("arena sweep", []string{"mstar", "arena", "sweep"}, reports.Env{"host": "gpu-a"})
	d.Start = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	d.RunID = "20261130T080000Z-0a1b2c3d" // NewDocument draws a fresh one
	s, err := reports.NewStreamWriter(&out, d)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Each result is written, in one line, as soon as it is measured.
	s.Add(reports.Result{Name: "copy", Params: reports.Params{"size": "4KiB"},
		Metrics: []reports.Metric{{Name: "bandwidth", Unit: "GB/s", Better: reports.HigherIsBetter, Samples: []float64{1.7}}}})
	d.End = d.Start.Add(time.Second)
	s.Close()
	fmt.Print(out.String())
	// Output:
	// {"record":"header","format":"mstar.results","schema":1,"suite":"arena sweep","command":["mstar","arena","sweep"],"start":"2026-11-30T08:00:00Z","env":{"host":"gpu-a"},"run_id":"20261130T080000Z-0a1b2c3d"}
	// {"record":"result","result":{"name":"copy","params":{"size":"4KiB"},"metrics":[{"name":"bandwidth","unit":"GB/s","better":"higher","samples":[1.7]}]}}
	// {"record":"footer","end":"2026-11-30T08:00:01Z"}
}
