package reports

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/perf/benchfmt"
)

func TestExportGoBenchGolden(t *testing.T) {
	m, err := Merge(twoMachines()...)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := ExportGoBench(&b, []*Document{m}); err != nil {
		t.Fatal(err)
	}
	golden(t, "export.gobench.golden", b.Bytes())
}

// TestExportGoBenchReadsBack reads the export with benchfmt and checks that
// every sample, its unit, direction and environment arrive.
func TestExportGoBenchReadsBack(t *testing.T) {
	docs := twoMachines()
	docs[0].Env["CUDA Driver"] = "13.0"
	docs[0].Results[0].Params["note"] = "a b/c"
	var b bytes.Buffer
	if err := ExportGoBench(&b, docs); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	type key struct{ name, unit, host string }
	got := map[key][]float64{}
	r := benchfmt.NewReader(&b, "export.txt")
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.SyntaxError:
			t.Fatalf("syntax error: %v", rec)
		case *benchfmt.Result:
			if rec.Iters != 1 || len(rec.Values) != 1 {
				t.Fatalf("%s: iters %d values %d", rec.Name, rec.Iters, len(rec.Values))
			}
			if host := rec.GetConfig("host"); host == "gpu-a" && rec.GetConfig("cuda-driver") != "13.0" {
				t.Errorf("%s on gpu-a: cuda-driver %q", rec.Name, rec.GetConfig("cuda-driver"))
			} else if host == "gpu-b" && rec.GetConfig("cuda-driver") != "" {
				t.Errorf("gpu-b inherited gpu-a's cuda-driver")
			}
			k := key{string(rec.Name.Full()), rec.Values[0].OrigUnit, rec.GetConfig("host")}
			if k.unit == "" {
				k.unit = rec.Values[0].Unit
			}
			got[k] = append(got[k], rec.Values[0].Value)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[key][]float64{}
	for _, d := range docs {
		for i := range d.Results {
			res := &d.Results[i]
			for _, m := range res.Metrics {
				if m.Measured() {
					k := key{strings.TrimPrefix(GoBenchName(res), "Benchmark"), GoBenchUnit(m), d.Env["host"]}
					want[k] = append(want[k], m.Samples...)
				}
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("samples read back (-want +got):\n-%v\n+%v", want, got)
	}
	units := r.Units()
	for _, tc := range []struct {
		unit string
		want int
	}{{"latency-us", -1}, {"tflops-TFLOP/s", 1}, {"bandwidth-GB/s", 1}} {
		if g := units.GetBetter(tc.unit); g != tc.want {
			t.Errorf("unit %s: better %d, want %d", tc.unit, g, tc.want)
		}
	}
	if !strings.Contains(text, "BenchmarkMoe/batch=1/model=qwen3-30b-a3b/note=a_b_c-1 1 ") {
		t.Errorf("parameter with space and slash not sanitised:\n%s", text)
	}
}

func TestGoBenchSanitise(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"host", "host"}, {"CUDA Driver", "cuda-driver"}, {"a:b", "a-b"}, {"2gpu", "x2gpu"}, {"_x", "x_x"}, {"", "x"}, {"mstar.commit", "mstar.commit"},
	} {
		if got := GoBenchKey(tc.in); got != tc.want {
			t.Errorf("GoBenchKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		m    Metric
		want string
	}{
		{Metric{Name: "latency", Unit: "us"}, "latency-us"},
		{Metric{Name: "copy rate", Unit: "GB / s"}, "copy_rate-GB_/_s"},
		{Metric{Name: "count"}, "count"},
	} {
		if got := GoBenchUnit(tc.m); got != tc.want {
			t.Errorf("GoBenchUnit(%+v) = %q, want %q", tc.m, got, tc.want)
		}
	}
	if got := GoBenchName(&Result{Name: "moe", Params: Params{"tag": "v-30"}}); got != "BenchmarkMoe/tag=v-30-1" {
		t.Errorf("GoBenchName = %q", got)
	}
}

func TestMerge(t *testing.T) {
	a, b := fixture("gpu-a", 1), fixture("gpu-b", 2)
	b.Suite = "arena sweep"
	b.Start = t0.Add(-1)
	b.End = t0.Add(1e12)
	b.Command = []string{"mstar", "arena", "sweep"}
	b.Warnings = []string{"w"}
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Env{"gpu": "NVIDIA H200", "cores": "16", "go": "go1.26.8"}); !reflect.DeepEqual(m.Env, want) {
		t.Errorf("merged env %v, want %v", m.Env, want)
	}
	if len(m.Results) != len(a.Results)+len(b.Results) {
		t.Fatalf("%d results", len(m.Results))
	}
	if got := m.EnvOf(&m.Results[0]); !reflect.DeepEqual(got, a.Env) {
		t.Errorf("first result's env %v, want %v", got, a.Env)
	}
	if got := m.EnvOf(&m.Results[len(a.Results)]); !reflect.DeepEqual(got, b.Env) {
		t.Errorf("second document's result env %v, want %v", got, b.Env)
	}
	if m.Suite != "bench moe + arena sweep" || !m.Start.Equal(b.Start) || !m.End.Equal(b.End) {
		t.Errorf("suite %q start %v end %v", m.Suite, m.Start, m.End)
	}
	if len(m.Warnings) != 2 || m.Warnings[0] != "w" || !strings.Contains(m.Warnings[1], "2 command lines") {
		t.Errorf("warnings %q", m.Warnings)
	}
	if err := m.Validate(); err != nil {
		t.Error(err)
	}
	// Merging a merged document with a third machine keeps every environment.
	c := fixture("gpu-c", 3)
	c.Env["gpu"] = "NVIDIA H100"
	mm, err := Merge(m, c)
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]string{}
	for i := range mm.Results {
		e := mm.EnvOf(&mm.Results[i])
		hosts[e["host"]] = e["gpu"]
	}
	if want := map[string]string{"gpu-a": "NVIDIA H200", "gpu-b": "NVIDIA H200", "gpu-c": "NVIDIA H100"}; !reflect.DeepEqual(hosts, want) {
		t.Errorf("hosts %v, want %v", hosts, want)
	}
	if _, ok := mm.Env["gpu"]; ok {
		t.Errorf("gpu differs but stayed in the shared env: %v", mm.Env)
	}
	// Inputs are not modified.
	if a.Results[0].Env != nil {
		t.Error("Merge changed its input")
	}
	// Same environment: nothing moves into results.
	s, err := Merge(fixture("gpu-a", 1), fixture("gpu-a", 2))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Results {
		if r.Env != nil {
			t.Errorf("same-env merge gave %s its own env %v", r.Key(), r.Env)
		}
	}
	if _, err := Merge(); err == nil {
		t.Error("Merge() succeeded")
	}
	bad := fixture("gpu-a", 1)
	bad.Schema = 9
	if _, err := Merge(a, bad); err == nil || !strings.Contains(err.Error(), "document 2") {
		t.Errorf("Merge of an invalid document: %v", err)
	}
}
