package reports

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/reports/results"
)

// gpuDoc is a merged document of GPUs with the given h2d ceilings (GB/s)
// and PCIe links, each also with a pageable and a small pinned copy.
func gpuDoc(h2d []float64, pcie []string) *Document {
	d := &Document{Format: results.Format, Schema: results.SchemaVersion, Env: Env{"host": "n1", "gpu": "NVIDIA H200"}}
	bw := func(v float64) []Metric {
		return []Metric{{Name: "bandwidth", Unit: "GB/s", Better: results.HigherIsBetter, Samples: []float64{v * 0.99, v, v * 1.01}}}
	}
	for k, v := range h2d {
		env := Env{"device": "cuda:" + string(rune('0'+k)), "gpu.uuid": "GPU-" + string(rune('a'+k)), "pcie": pcie[k]}
		d.Results = append(d.Results,
			Result{Name: "ceiling", Params: Params{"what": "h2d"}, Env: env, Metrics: bw(v)},
			Result{Name: "ceiling", Params: Params{"what": "gemm"}, Env: env, Metrics: []Metric{{Name: "throughput", Unit: "TFLOP/s", Better: results.HigherIsBetter, Samples: []float64{700 - 100*float64(k)}}}},
			// Pageable and small copies vary too much to tell a card by.
			Result{Name: "copy", Params: Params{"memory": "pageable", "dir": "h2d", "size": "268435456"}, Env: env, Metrics: bw(9 - 3*float64(k))},
			Result{Name: "copy", Params: Params{"memory": "pinned", "dir": "h2d", "size": "65536"}, Env: env, Metrics: bw(20 - 5*float64(k))},
		)
	}
	return d
}

func TestSummarizeGPUsFlagsTheOutlier(t *testing.T) {
	gen5 := "gen5 x16 (max gen5 x16)"
	rows, warns := SummarizeGPUs(gpuDoc([]float64{55.2, 55.0, 54.7, 47.0}, []string{gen5, gen5, gen5, gen5}))
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for k, g := range rows {
		if g.Results != 4 || g.Compared != 1 {
			t.Errorf("%s: %d results, %d compared; want 4 and 1 (the h2d ceiling)", g.Device, g.Results, g.Compared)
		}
		if flagged := len(g.Flags) > 0; flagged != (k == 3) {
			t.Errorf("%s (h2d %v): flags %q", g.Device, []float64{55.2, 55.0, 54.7, 47.0}[k], g.Flags)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "cuda:3 (GPU-d): h2d ceiling 47.0 GB/s is 15% below its peers' median 55.0 GB/s") {
		t.Errorf("warnings %q", warns)
	}
	// 9% below is within the bound.
	if _, warns := SummarizeGPUs(gpuDoc([]float64{55, 55, 50.2}, []string{gen5, gen5, gen5})); len(warns) != 0 {
		t.Errorf("9%% below its peers flagged: %q", warns)
	}
	// Two GPUs: each is the other's peer; only the slow one is flagged.
	if _, warns := SummarizeGPUs(gpuDoc([]float64{55, 45}, []string{gen5, gen5})); len(warns) != 1 || !strings.Contains(warns[0], "cuda:1") {
		t.Errorf("two GPUs: %q", warns)
	}
}

func TestSummarizeGPUsPCIe(t *testing.T) {
	idle := "gen1 x16 (max gen5 x16)"
	rows, warns := SummarizeGPUs(gpuDoc([]float64{55, 55, 55}, []string{idle, idle, idle}))
	if len(warns) != 0 {
		t.Errorf("links idle alike (trained down together) flagged: %q", warns)
	}
	_, warns = SummarizeGPUs(gpuDoc([]float64{55, 55, 55}, []string{"gen5 x16 (max gen5 x16)", "gen4 x16 (max gen5 x16)", "gen5 x8 (max gen5 x16)"}))
	if len(warns) != 2 || !strings.Contains(warns[0], "cuda:1 (GPU-b): PCIe link gen4 below its max gen5 while a peer's runs gen5") ||
		!strings.Contains(warns[1], "cuda:2 (GPU-c): PCIe link x8 below its max x16") {
		t.Errorf("warnings %q", warns)
	}
	// One GPU: nothing to compare; a narrow link is still flagged.
	rows, warns = SummarizeGPUs(gpuDoc([]float64{30}, []string{"gen5 x8 (max gen5 x16)"}))
	if len(rows) != 1 || rows[0].Compared != 0 || len(warns) != 1 {
		t.Errorf("one GPU: %+v, %q", rows, warns)
	}
	var b bytes.Buffer
	if err := WriteGPUSummary(&b, rows); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "cuda:0") || !strings.Contains(out, "FLAG: PCIe link x8") {
		t.Errorf("summary:\n%s", out)
	}
}

// The summary shows a UUID by its short form, so a row of an unflagged
// card fits 100 columns; the rows themselves keep the whole UUID.
func TestGPUSummaryShortUUID(t *testing.T) {
	full := "GPU-475fb897-7929-14f9-ea6c-461affbc2aa1"
	rows := []GPURow{{Device: "cuda:0", GPU: "NVIDIA H100 80GB HBM3", UUID: full, PCIe: "gen5 x16 (max gen5 x16)", Results: 12, Compared: 12, Worst: "-3.1% d2d 256 MiB"}}
	var b bytes.Buffer
	if err := WriteGPUSummary(&b, rows); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "GPU-475fb897 ") || strings.Contains(out, full) {
		t.Errorf("want the short UUID, not the whole one:\n%s", out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("%d columns: %q", n, l)
		}
	}
}
