package reports

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

func TestP2PTable(t *testing.T) {
	d := &Document{Suite: "bench p2p"}
	add := func(src, dst, peer string, gbps float64, wrong bool) {
		r := Result{Name: "p2p", Params: Params{"src": src, "dst": dst, "peer": peer}, Gates: []results.Gate{{Name: "copy verified", Pass: !wrong}}}
		bw := Metric{Name: "bandwidth", Unit: "GB/s", Better: results.HigherIsBetter, Samples: []float64{gbps}}
		if gbps == 0 {
			bw.Samples, bw.Unmeasured = nil, "no direct path"
		}
		r.Metrics = []Metric{bw, {Name: "latency", Unit: "us", Better: results.LowerIsBetter, Samples: []float64{2.5}}}
		d.Results = append(d.Results, r)
	}
	add("0", "1", "on", 380, false)
	add("1", "0", "on", 0, false)
	add("0", "1", "off", 20, true)
	add("1", "0", "off", 21, false)
	var b bytes.Buffer
	if err := RunTable(&b, d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"peer access on", "380", "n/a", "20 WRONG", "21", "latency us"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if lines := strings.Split(out, "\n"); !strings.Contains(lines[2], "cuda:0") || !strings.Contains(lines[2], "380") || !strings.Contains(lines[2], "-") {
		t.Errorf("row cuda:0 of the first matrix: %q\n%s", lines[2], out)
	}
}
