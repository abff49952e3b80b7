package reports

import (
	"bytes"
	"image/png"
	"strconv"
	"strings"
	"testing"
)

func TestWriteLoadHeatMap(t *testing.T) {
	var rs []Result
	for _, router := range []string{"softmax-topk", "hash", "switch", "random"} {
		rs = append(rs, Result{Name: "router", Params: Params{"router": router}})
		for layer := range 3 {
			load := make([]float64, 64)
			for e := range load {
				load[e] = float64((e*7 + layer) % 13)
			}
			rs = append(rs, Result{Name: "router/layer", Params: Params{"router": router, "layer": strconv.Itoa(layer)},
				Metrics: []Metric{{Name: "expert_load", Unit: "tokens", Better: LowerIsBetter, Samples: load}}})
		}
	}
	runs := loadRuns(rs)
	if len(runs) != 4 || runs[1].router != "hash" || len(runs[1].load) != 3 || runs[1].layers[2] != "2" {
		t.Fatalf("grouped %d routers (%+v), want 4 in order with 3 layers each", len(runs), runs)
	}
	var img bytes.Buffer
	if err := WriteLoadHeatMap(&img, rs); err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(&img)
	if err != nil {
		t.Fatalf("heat map is not a PNG: %v", err)
	}
	if cfg.Width < 500 || cfg.Height < 500 {
		t.Errorf("heat map is %d×%d pixels, want a readable size", cfg.Width, cfg.Height)
	}
	if err := WriteLoadHeatMap(&img, rs[:1]); err == nil || !strings.Contains(err.Error(), "no routers ran") {
		t.Errorf("no per-layer results: %v, want 'no routers ran'", err)
	}
}
