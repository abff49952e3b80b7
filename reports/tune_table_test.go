package reports

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// tune moe's table reads its document alone: the chosen candidate and the
// static table's pick from the candidates' warnings, their latencies from
// their samples, and the comparison from the two sides' sweeps.
func TestTuneTable(t *testing.T) {
	cand := func(batch, config string, lat []float64, warns ...string) Result {
		m := Metric{Name: "tune_latency", Unit: "µs", Better: results.LowerIsBetter, Samples: lat}
		if lat == nil {
			m.Unmeasured = "rejected"
		}
		return Result{Name: "moe_tune", Role: results.RoleContext, Params: Params{"batch": batch, "config": config, "model": "m1", "tp": "2", "ep": "1"},
			Metrics: []Metric{m}, Warnings: warns}
	}
	sweep := func(side, round, batch string, lat ...float64) Result {
		return Result{Name: "moe", Params: Params{"batch": batch, "configs": side, "round": round, "config": side + "-cfg", "model": "m1"},
			Metrics: []Metric{{Name: "latency", Unit: "µs", Better: results.LowerIsBetter, Samples: lat},
				{Name: "throughput", Unit: "TFLOP/s", Better: results.HigherIsBetter, Samples: lat}}}
	}
	d := &Document{Suite: "tune moe", Env: Env{"device": "cuda:0", "gpu": "H200", EnvTunedKey: "E=8 N=32 K=64 topk=2 bf16 on H200",
		EnvTunedFile: "/c/x.json", envKernelsVersion: "moe.cu-1", EnvTuneThreshold: "7"},
		Warnings: []string{"two\nlines", results.WarnInterrupted},
		Results: []Result{
			cand("1", "wg/64", []float64{10, 11, 12}, "chosen: the fastest candidate that passed", "static table: tc/32"),
			cand("1", "tc/32", []float64{20, 20.04, 21}),
			cand("1", "sk/16", nil, "rejected: rel_l2 0.5 over 0.01"),
			cand("8", "tc/32", nil, "rejected: launch failed"),
			cand("16", "wg/64", []float64{30}, "chosen: the fastest candidate that passed", "static table: tc/64"),
			sweep("static", "1", "1", 20, 21, 22), sweep("tuned", "1", "1", 10, 11, 12),
			sweep("tuned", "2", "1", 10, 11, 12), sweep("static", "2", "1", 20, 21, 22),
		}}
	var b bytes.Buffer
	if err := RunTable(&b, d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# mstar tune moe: m1 (tp 2, ep 1) on cuda:0 (H200): E=8 N=32 K=64 topk=2 bf16 on H200\n",
		"# file /c/x.json (kernels moe.cu-1)\n",
		"# warning: two\n#   lines\n",
		"1      11.0         20.0       1.82×    3           1",
		"16     30.0         -          -        1           0",
		"8      none passed  -          -        1           1",
		"# M=1 chosen wg/64; static table tc/32\n",
		"# M=16 chosen wg/64; static table tc/64\n",
		"# M=1 rejected sk/16: rel_l2 0.5 over 0.01\n",
		"threshold 7%",
		"moe/batch=1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tune table lacks %q:\n%s", want, out)
		}
	}
	// A split configuration (~120 characters) wraps at its halves: the
	// table and the configuration lines fit 100 columns.
	split := "tc:bm=32,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1+tc:bm=32,bn=256,bk=64,wm=1,wn=4,stages=3,gm=8,minb=1,ov=1"
	d.Results = append(d.Results, cand("512", split, []float64{700}, "chosen: the fastest candidate that passed", "static table: tc:bm=32,bn=256,bk=64,wm=1,wn=4,stages=3,gm=8,minb=1"))
	b.Reset()
	if err := RunTable(&b, d); err != nil {
		t.Fatal(err)
	}
	wide := b.String()
	if !strings.Contains(wide, "# M=512 chosen tc:bm=32,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1 +\n#     tc:bm=32,bn=256,bk=64") {
		t.Errorf("the split configuration is not wrapped at its halves:\n%s", wide)
	}
	head, _, _ := strings.Cut(wide, "# tuned file (new)")
	for _, l := range strings.Split(head, "\n") {
		if n := len([]rune(l)); n > 100 {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
	if strings.Contains(out, "an A/A pair") {
		t.Errorf("batches whose pick is not the static one read as an A/A pair:\n%s", out)
	}
	if strings.Contains(out, "interrupted") || strings.Contains(out, "M=8 rejected") {
		t.Errorf("the interrupted note goes to stderr, and a batch with no pick has no rejection list:\n%s", out)
	}
	// The tuned batches come first, the one with none passed last.
	if i, j := strings.Index(out, "  16  "), strings.Index(out, "none passed"); i < 0 || j < i {
		t.Errorf("row order:\n%s", out)
	}
}

// tune moe --finalists: a batch whose finalists ran in fresh processes
// says how each read there beside its time in the tuner, the chosen marked.
func TestTuneTableFinalists(t *testing.T) {
	cand := func(config string, lat, fresh []float64, warns ...string) Result {
		r := Result{Name: "moe_tune", Role: results.RoleContext, Params: Params{"batch": "4", "config": config, "model": "m1"},
			Metrics: []Metric{{Name: "tune_latency", Unit: "µs", Better: results.LowerIsBetter, Samples: lat}}, Warnings: warns}
		if fresh != nil {
			r.Metrics = append(r.Metrics, Metric{Name: "tune_fresh_latency", Unit: "µs", Better: results.LowerIsBetter, Samples: fresh})
		}
		return r
	}
	d := &Document{Suite: "tune moe", Env: Env{"device": "cuda:0", "gpu": "H200"}, Results: []Result{
		cand("tc/16x256", []float64{247.6}, []float64{265.1, 265.4}, "static table: tc/16x256"),
		cand("tc/16x128", []float64{252.0}, []float64{261.0, 261.2}, "chosen: the fastest finalist in fresh processes"),
		cand("tc/32x128", []float64{290}, nil),
	}}
	var b bytes.Buffer
	if err := RunTable(&b, d); err != nil {
		t.Fatal(err)
	}
	want := "# M=4 in fresh processes: tc/16x256 265.2 µs, in the tuner 247.6; tc/16x128 261.1 µs, in the tuner 252.0 (chosen)\n"
	if out := b.String(); !strings.Contains(strings.ReplaceAll(out, "\n#     ", " "), strings.TrimSuffix(want, "\n")) || strings.Contains(out, "tc/32x128 ") {
		t.Errorf("tune table lacks the finalists line %q (or names a candidate that was not one):\n%s", want, out)
	}
}

// Where every batch's pick is the static table's (the CPU's one
// implementation), the comparison is an A/A pair and says so, and a
// "regression" it finds is said not to set the exit code.
func TestTuneTableAAPair(t *testing.T) {
	m := func(side, round string, lat ...float64) Result {
		return Result{Name: "moe", Params: Params{"batch": "4", "configs": side, "round": round},
			Metrics: []Metric{{Name: "latency", Unit: "µs", Better: results.LowerIsBetter, Samples: lat}}}
	}
	d := &Document{Suite: "tune moe", Env: Env{"device": "cpu"}, Results: []Result{
		{Name: "moe_tune", Role: results.RoleContext, Params: Params{"batch": "4", "config": "auto"},
			Metrics:  []Metric{{Name: "tune_latency", Unit: "µs", Better: results.LowerIsBetter, Samples: []float64{5, 5, 5}}},
			Warnings: []string{"chosen: the fastest candidate that passed", "static table: auto"}},
		m("static", "1", 10, 10.1, 10.2, 10, 10.1, 10.2), m("tuned", "1", 20, 20.1, 20.2, 20, 20.1, 20.2),
		m("tuned", "2", 20, 20.1, 20.2, 20, 20.1, 20.2), m("static", "2", 10, 10.1, 10.2, 10, 10.1, 10.2),
	}}
	var b bytes.Buffer
	if err := RunTable(&b, d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"REGRESSION", "an A/A pair", "the exit code does not depend on this comparison"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
	// A batch resumed from the file (swept, but no candidates this run)
	// may run another pick than the static one: no longer an A/A pair.
	resumed := func(side, round string) Result {
		r := m(side, round, 10, 10.1, 10.2)
		r.Params["batch"] = "8"
		return r
	}
	d.Results = append(d.Results, resumed("static", "1"), resumed("tuned", "1"), resumed("static", "2"), resumed("tuned", "2"))
	b.Reset()
	if err := RunTable(&b, d); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "an A/A pair") {
		t.Errorf("a resumed batch still reads as an A/A pair:\n%s", b.String())
	}
}
