package p2p

import (
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/reports/results"
)

func TestCheckAndPairs(t *testing.T) {
	o := Options{Devices: []int{0}}
	if err := o.Check(); err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), "two GPUs or more") {
		t.Errorf("one GPU: %v", err)
	}
	o = Options{Devices: []int{0, 2, 3}}
	if err := o.Check(); err != nil || o.Size != 256<<20 || o.Small != 4<<10 || o.Samples != 10 || o.Repeat != 100 {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	want := [][2]int{{0, 2}, {0, 3}, {2, 0}, {2, 3}, {3, 0}, {3, 2}}
	if got := o.Pairs(); !slices.Equal(got, want) {
		t.Errorf("pairs %v, want %v", got, want)
	}
	bad := Options{Devices: []int{0, 1}, Size: 1 << 10, Small: 1 << 20}
	if err := bad.Check(); err == nil || !badinput.Is(err) {
		t.Errorf("small above size: %v", err)
	}
}

func TestMatrix(t *testing.T) {
	bw := func(v ...float64) []results.Metric {
		return []results.Metric{{Name: MetricBandwidth, Unit: "GB/s", Better: results.HigherIsBetter, Samples: v}}
	}
	rs := []results.Result{
		{Name: ResultName, Params: results.Params{"src": "0", "dst": "1", "peer": "on"}, Metrics: bw(300, 310, 320)},
		{Name: ResultName, Params: results.Params{"src": "1", "dst": "0", "peer": "on"}, Metrics: unmeasured("no path")},
		{Name: ResultName, Params: results.Params{"src": "0", "dst": "1", "peer": "off"}, Metrics: bw(20)},
		{Name: "other", Params: results.Params{"src": "0", "dst": "1", "peer": "on"}, Metrics: bw(1)},
	}
	on := Matrix(rs, "on")
	if len(on) != 1 || on[[2]int{0, 1}] != 310 {
		t.Errorf("peer on: %v, want only 0->1 at its median 310", on)
	}
	if off := Matrix(rs, "off"); len(off) != 1 || off[[2]int{0, 1}] != 20 {
		t.Errorf("peer off: %v", off)
	}
}
