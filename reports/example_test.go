package reports_test

import (
	"fmt"
	"os"

	"github.com/mstar-dev/mstar/reports"
	"github.com/mstar-dev/mstar/reports/results"
)

func doc(samples ...float64) *reports.Document {
	d := results.NewDocument("bench moe", []string{"mstar", "bench", "moe"}, reports.Env{"host": "gpu-a"})
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
