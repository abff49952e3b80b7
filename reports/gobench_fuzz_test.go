package reports

import (
	"bytes"
	"testing"

	"golang.org/x/perf/benchfmt"

	"github.com/mstar-dev/mstar/reports/results"
)

// FuzzExportGoBench: any document Read accepts exports to text that
// golang.org/x/perf's benchfmt reads without a syntax error, one result
// line per sample of a measured metric.
func FuzzExportGoBench(f *testing.F) {
	var b bytes.Buffer
	if err := results.Write(&b, fixture("gpu-a", 1)); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte(`{"format":"mstar.results","schema":1,"env":{"a b:c":"x\ny"},"results":[{"name":"r r/=","params":{"k=/ ":"v /="},"metrics":[{"name":"m","unit":"s s","better":"lower","samples":[1,2]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := results.Read(bytes.NewReader(data), "fuzz.json")
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := ExportGoBench(&out, []*Document{d}); err != nil {
			return
		}
		want := 0
		for _, r := range d.Results {
			for _, m := range r.Metrics {
				if m.Unmeasured == "" {
					want += len(m.Samples)
				}
			}
		}
		got := 0
		br := benchfmt.NewReader(bytes.NewReader(out.Bytes()), "fuzz.txt")
		for br.Scan() {
			switch rec := br.Result().(type) {
			case *benchfmt.SyntaxError:
				t.Fatalf("export does not parse: %v\n%s", rec, out.Bytes())
			case *benchfmt.Result:
				got++
			}
		}
		if got != want {
			t.Fatalf("%d result lines for %d samples:\n%s", got, want, out.Bytes())
		}
	})
}
