package reports

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

func TestDecimateKeepsExtremes(t *testing.T) {
	pts := make([]Point, 100000)
	for i := range pts {
		pts[i] = Point{X: float64(i), Summary: Summary{Median: float64(i % 7)}}
	}
	pts[54321].Median = 1000 // a spike
	pts[76543].Median = -1000
	got := Decimate(pts, MaxPlotPoints)
	if len(got) != MaxPlotPoints {
		t.Fatalf("%d points after decimation, want %d", len(got), MaxPlotPoints)
	}
	spike, dip := false, false
	for i, p := range got {
		spike = spike || p.Median == 1000
		dip = dip || p.Median == -1000
		if i > 0 && p.X <= got[i-1].X {
			t.Fatalf("points out of x order at %d", i)
		}
	}
	if !spike || !dip {
		t.Errorf("decimation lost the spike (%v) or the dip (%v)", spike, dip)
	}
	if short := Decimate(pts[:10], MaxPlotPoints); len(short) != 10 {
		t.Errorf("a short series was thinned to %d", len(short))
	}
}

// Plot decimates a long series and says so.
func TestPlotDecimatesLongSeries(t *testing.T) {
	d := results.NewDocument("t", nil, Env{"host": "h"})
	for i := 0; i < 3000; i++ {
		d.Results = append(d.Results, Result{Name: "r", Params: Params{"x": fmt.Sprint(i)},
			Metrics: []Metric{{Name: "m", Unit: "s", Better: LowerIsBetter, Samples: []float64{float64(i % 13)}}}})
	}
	var buf bytes.Buffer
	warns, err := Plot(&buf, "svg", []*Document{d}, PlotOptions{Metric: "m", X: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "3000 points drawn as 500") {
		t.Errorf("warnings %q", warns)
	}
}
