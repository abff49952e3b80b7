package reports

import (
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// A result measured while throttled says so in show's notes and in diff's
// warnings; an unthrottled one does not.
func TestThrottledResultsAreNamed(t *testing.T) {
	hot := Result{Name: "ceiling", Params: Params{"what": "gemm"},
		Metrics:  []Metric{{Name: "throughput", Unit: "TFLOP/s", Better: HigherIsBetter, Samples: []float64{690, 691}}},
		GPUState: &GPUState{Samples: 9, SMClockMHz: [2]float64{1755, 1980}, PowerW: [2]float64{420, 699}, PowerLimitW: [2]float64{700, 700}, TempC: [2]float64{41, 57}, Reasons: []string{"sw_power_cap"}, PowerThrottled: true}}
	cool := hot
	cool.Params = Params{"what": "d2d"}
	cool.GPUState = &GPUState{Samples: 3, Reasons: []string{"gpu_idle"}}
	note := hot.ThrottleNote()
	if !strings.Contains(note, "power-throttled (sw_power_cap)") || !strings.Contains(note, "SM clock 1755–1980 MHz") || !strings.Contains(note, "power 420–699 W of a 700 W limit (NVML's power: a 1 s average on Hopper)") {
		t.Errorf("note %q", note)
	}
	if cool.ThrottleNote() != "" {
		t.Errorf("an unthrottled result noted: %q", cool.ThrottleNote())
	}
	doc := &Document{Format: results.Format, Schema: results.SchemaVersion, Results: []Result{hot, cool}}
	var b strings.Builder
	tabs, err := Tables([]*Document{doc}, TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tabs {
		for _, n := range tb.notes() {
			b.WriteString(n + "\n")
		}
	}
	if !strings.Contains(b.String(), "ceiling/what=gemm: measured while power-throttled") || strings.Contains(b.String(), "what=d2d: measured while") {
		t.Errorf("show's notes:\n%s", b.String())
	}
	c := Diff([]*Document{doc}, []*Document{doc}, DiffOptions{})
	found := 0
	for _, w := range c.Warnings {
		if strings.Contains(w, "measured while power-throttled") {
			found++
		}
	}
	if found != 2 { // base and new
		t.Errorf("diff warnings %q", c.Warnings)
	}
}
