package results_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/mstar-dev/mstar/reports/results"
)

func ExampleSummarize() {
	s := results.Summarize([]float64{52.1, 51.9, 52.4, 52.0, 51.8, 52.2, 52.3, 51.7})
	fmt.Printf("median %.2f, 95%% CI [%.1f, %.1f], n=%d, ±%.1f%%\n", s.Median, s.Lo, s.Hi, s.N, s.HalfWidthPct())
	// Output: median 52.05, 95% CI [51.7, 52.3], n=8, ±0.7%
}

func ExampleNewStreamWriter() {
	var out strings.Builder
	d := results.NewDocument("arena sweep", []string{"mstar", "arena", "sweep"}, results.Env{"host": "gpu-a"})
	d.Start = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	s, err := results.NewStreamWriter(&out, d)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Each result is written, in one line, as soon as it is measured.
	s.Add(results.Result{Name: "copy", Params: results.Params{"size": "4KiB"},
		Metrics: []results.Metric{{Name: "bandwidth", Unit: "GB/s", Better: results.HigherIsBetter, Samples: []float64{1.7}}}})
	d.End = d.Start.Add(time.Second)
	s.Close()
	fmt.Print(out.String())
	// Output:
	// {"record":"header","format":"mstar.results","schema":1,"suite":"arena sweep","command":["mstar","arena","sweep"],"start":"2026-11-30T08:00:00Z","env":{"host":"gpu-a"}}
	// {"record":"result","result":{"name":"copy","params":{"size":"4KiB"},"metrics":[{"name":"bandwidth","unit":"GB/s","better":"higher","samples":[1.7]}]}}
	// {"record":"footer","end":"2026-11-30T08:00:01Z"}
}
