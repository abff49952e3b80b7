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

// Results measured on a busy host are noted once a table, once a side of a
// diff and once a run of rounds, with the range of how busy; a quiet host
// or a host that could not be read is not noted.
func TestBusyHostIsNotedOnce(t *testing.T) {
	res := func(batch string, h *HostState) Result {
		return Result{Name: "moe", Params: Params{"batch": batch},
			Metrics: []Metric{{Name: "latency", Unit: "µs", Better: LowerIsBetter, Samples: []float64{10, 11}}}, HostState: h}
	}
	busy1 := &HostState{Seconds: 1.2, CPUs: 2, StealPct: 13, OtherPct: 1, Busy: true}
	busy2 := &HostState{Seconds: 0.4, CPUs: 2, StealPct: 38, OtherPct: 0, Busy: true}
	quiet := &HostState{Seconds: 2, CPUs: 2, StealPct: 1, OtherPct: 2}
	rs := []Result{res("1", busy1), res("16", busy2), res("64", quiet), res("256", nil)}
	note := results.BusyHostNote(rs)
	if !strings.Contains(note, "2 of 3 results measured on a busy host (2 CPUs): the hypervisor took 13–38% of the CPU time (steal), other processes used 0–1%") {
		t.Errorf("note %q", note)
	}
	if n := results.BusyHostNote([]Result{res("1", quiet), res("2", nil)}); n != "" {
		t.Errorf("a quiet host noted: %q", n)
	}
	doc := &Document{Format: results.Format, Schema: results.SchemaVersion, Results: rs}
	tabs, err := Tables([]*Document{doc}, TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, tb := range tabs {
		for _, n := range tb.notes() {
			count += strings.Count(n, "busy host")
		}
	}
	if count != 1 {
		t.Errorf("show noted the busy host %d times", count)
	}
	c := Diff([]*Document{doc}, []*Document{doc}, DiffOptions{})
	var sides []string
	for _, w := range c.Warnings {
		if strings.Contains(w, "busy host") {
			sides = append(sides, w[:strings.Index(w, ":")])
		}
	}
	if strings.Join(sides, ",") != "base,new" {
		t.Errorf("diff warnings %q", c.Warnings)
	}
	// Rounds keep the busiest round's state, and the GPU's range over all.
	a, b := res("1", quiet), res("1", busy2)
	a.GPUState = &GPUState{Samples: 2, SMClockMHz: [2]float64{1900, 1980}, Reasons: []string{"gpu_idle"}}
	b.GPUState = &GPUState{Samples: 3, SMClockMHz: [2]float64{1440, 1700}, Reasons: []string{"sw_power_cap"}, PowerThrottled: true}
	j := results.JoinRounds([][]Result{{a}, {b}, {res("1", busy1)}})
	if len(j) != 1 || j[0].HostState != busy2 {
		t.Fatalf("joined host state %+v", j[0].HostState)
	}
	g := j[0].GPUState
	if g.Samples != 5 || g.SMClockMHz != [2]float64{1440, 1980} || !g.PowerThrottled || strings.Join(g.Reasons, ",") != "gpu_idle,sw_power_cap" {
		t.Errorf("joined GPU state %+v", g)
	}
}
