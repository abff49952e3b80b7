package results

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// streamOf writes d in the streaming form, result by result.
func streamOf(t testing.TB, d *Document) []byte {
	t.Helper()
	var b bytes.Buffer
	head := *d
	head.Results = nil
	head.Warnings = append([]string(nil), d.Warnings...)
	s, err := NewStreamWriter(&b, &head)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Results {
		if err := s.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestStreamRoundTrip(t *testing.T) {
	d := fixture("gpu-a", 2)
	d.Warnings = []string{"from the start"}
	b := streamOf(t, d)
	if n := bytes.Count(b, []byte("\n")); n != len(d.Results)+2 {
		t.Errorf("stream has %d lines, want header + %d results + footer", n, len(d.Results))
	}
	got, err := Read(bytes.NewReader(b), "s.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, d) {
		t.Errorf("stream read back differently:\nwant %+v\ngot  %+v", d, got)
	}
}

func TestStreamFooterWarningsAndEnd(t *testing.T) {
	var b bytes.Buffer
	d := fixture("gpu-a", 2)
	d.End = d.End.Add(0) // keep End: Close must not overwrite a set End
	results := d.Results
	d.Results = nil
	d.Warnings = []string{"early"}
	s, err := NewStreamWriter(&b, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(results[0]); err != nil {
		t.Fatal(err)
	}
	d.Warnings = append(d.Warnings, "late")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(results[1]); err == nil {
		t.Error("Add after Close succeeded")
	}
	if len(d.Results) != 1 {
		t.Errorf("document has %d results after one Add, want 1", len(d.Results))
	}
	got, err := Read(&b, "s")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"early", "late"}; !reflect.DeepEqual(got.Warnings, want) {
		t.Errorf("warnings %q, want %q", got.Warnings, want)
	}
	if !got.End.Equal(d.End) {
		t.Errorf("End %v, want %v", got.End, d.End)
	}
}

func TestStreamAddRejectsInvalid(t *testing.T) {
	var b bytes.Buffer
	d := fixture("gpu-a", 2)
	d.Results = nil
	s, err := NewStreamWriter(&b, d)
	if err != nil {
		t.Fatal(err)
	}
	before := b.Len()
	err = s.Add(Result{Name: "x", Metrics: []Metric{{Name: "m", Unit: "s", Better: LowerIsBetter}}})
	if err == nil || !strings.Contains(err.Error(), "neither samples nor an unmeasured reason") {
		t.Errorf("Add of an invalid result: %v", err)
	}
	if b.Len() != before {
		t.Error("an invalid result was written")
	}
}

func TestCreateStreamInterrupted(t *testing.T) {
	// A run that dies after two results leaves a stream without a footer:
	// it still reads, with both results and a warning.
	path := filepath.Join(t.TempDir(), "r.ndjson")
	d := fixture("gpu-a", 3)
	results := d.Results
	d.Results = nil
	s, err := CreateStream(path, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results[:2] {
		if err := s.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	// No Close: read what is on disk now.
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Results) != 2 {
		t.Errorf("read %d results, want 2", len(got.Results))
	}
	if len(got.Warnings) != 2 || got.Warnings[0] != WarnInterrupted || !strings.Contains(got.Warnings[1], "no footer") {
		t.Errorf("warnings %q, want the interrupted warning and one about the missing footer", got.Warnings)
	}
	// Killed while writing a third record: the torn line is left out.
	torn, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	full := streamOf(t, fixture("gpu-a", 3))
	lines := strings.SplitAfter(string(full), "\n")
	torn = append(torn, lines[3][:len(lines[3])/2]...)
	got, err = Read(bytes.NewReader(torn), "torn.ndjson")
	if err != nil || len(got.Results) != 2 || !strings.Contains(strings.Join(got.Warnings, "|"), "torn") {
		t.Errorf("torn last record: %v, %d results, warnings %q; want 2 results and a torn-record warning", err, len(got.Results), got.Warnings)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got, err = ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Warnings) != 0 || got.End.IsZero() {
		t.Errorf("closed stream: warnings %q end %v", got.Warnings, got.End)
	}
	st, _ := os.Stat(path)
	if st.Size() == 0 {
		t.Error("empty stream file")
	}
}

func TestReadStreamErrors(t *testing.T) {
	full := string(streamOf(t, fixture("gpu-a", 4)))
	lines := strings.SplitAfter(full, "\n")
	header, result, footer := lines[0], lines[1], lines[len(lines)-2]
	for _, tc := range []struct {
		name, in, want string
	}{
		{"malformed line", header + result + "{\"record\": \"result\", \"result\": {]\n" + footer,
			"reading s.ndjson: line 3, column 33: invalid character ']' looking for beginning of object key string"},
		{"truncated line", header + result[:40] + "\n", "reading s.ndjson: line 2, column 41: unexpected end of input (truncated file?)"},
		{"unknown record", header + "{\"record\":\"sample\"}\n", `reading s.ndjson: line 2: unknown record "sample" (want header, result or footer)`},
		{"no record field", header + "{\"name\":\"x\"}\n", `reading s.ndjson: line 2: unknown record "" (want header, result or footer)`},
		{"after footer", header + footer + result, `reading s.ndjson: line 3: "result" record after the footer`},
		{"second header", header + result + header, "reading s.ndjson: line 3: a second header"},
		{"result without result", header + "{\"record\":\"result\"}\n", "reading s.ndjson: line 2: result record without a result"},
		{"invalid result", header + `{"record":"result","result":{"name":"","metrics":[]}}` + "\n", "reading s.ndjson: line 2: result 0 has no name"},
		{"wrong type", header + `{"record":"result","result":{"name":"x","metrics":[{"name":"m","samples":"1"}]}}` + "\n",
			"reading s.ndjson: line 2, column 76: field result.metrics.samples: expected an array, found string"},
		{"schema", strings.Replace(header, `"schema":1`, `"schema":7`, 1) + result, "reading s.ndjson: line 1: unsupported schema version 7 (this mstar reads version 1)"},
		{"blank lines are fine but not garbage", header + "\n\n" + "garbage\n", "reading s.ndjson: line 4, column 1: invalid character 'g' looking for beginning of value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.in), "s.ndjson")
			if err == nil || err.Error() != tc.want {
				t.Errorf("error (-want +got):\n-%s\n+%v", tc.want, err)
			}
		})
	}
}

func TestIsStream(t *testing.T) {
	whole := new(bytes.Buffer)
	if err := Write(whole, fixture("gpu-a", 1)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{whole.String(), false},
		{`{"format":"mstar.results","schema":1}`, false},
		{`{"record":"header","format":"mstar.results","schema":1}`, true},
		{"\n\n  " + `{"record":"header"}` + "\n", true},
		{`{"record":"result"}`, false},
		{`{"record":"header"`, false},
	} {
		if got := isStream([]byte(tc.in)); got != tc.want {
			t.Errorf("isStream(%.40q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// A --rounds run streams each round's results; a reader of the stream
// left by a kill joins them as the written document would.
// readBackStream streams rs (no footer unless closed) and reads it back.
func readBackStream(t *testing.T, closed bool, rs ...Result) *Document {
	t.Helper()
	var b strings.Builder
	s, err := NewStreamWriter(&b, NewDocument("bench moe", []string{"mstar", "bench", "moe"}, Env{"host": "h"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := s.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if closed {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Read(strings.NewReader(b.String()), "run.partial.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// latencyResult is result "moe/batch=1" of run with latency samples v.
func latencyResult(run string, v ...float64) Result {
	return Result{Name: "moe", Run: run, Params: Params{"batch": "1"},
		Metrics: []Metric{{Name: "latency", Unit: "µs", Better: LowerIsBetter, Samples: v}}}
}

func TestReadStreamJoinsRounds(t *testing.T) {
	got := readBackStream(t, false, latencyResult("", 10, 11), latencyResult("", 20, 21))
	if len(got.Results) != 1 {
		t.Fatalf("got %d results, want the two rounds joined into 1", len(got.Results))
	}
	m := got.Results[0].Metric("latency")
	if !slices.Equal(m.Samples, []float64{10, 11, 20, 21}) || !slices.Equal(m.Rounds, []int{0, 0, 1, 1}) {
		t.Errorf("samples %v rounds %v, want [10 11 20 21] in rounds [0 0 1 1]", m.Samples, m.Rounds)
	}
	if !got.Interrupted() {
		t.Error("a stream without its footer should read as interrupted")
	}
}

// A merged document's results carry their runs: streamed, two runs'
// results of one key stay two results, while one run's repeat is a round.
func TestReadStreamKeepsRunsApart(t *testing.T) {
	got := readBackStream(t, true, latencyResult("run-a", 10), latencyResult("run-b", 20), latencyResult("run-a", 30))
	if len(got.Results) != 2 {
		t.Fatalf("got %d results, want run-a's two rounds joined and run-b's apart (2)", len(got.Results))
	}
	a, b := got.Results[0], got.Results[1]
	if a.Run != "run-a" || !slices.Equal(a.Metric("latency").Samples, []float64{10, 30}) || !slices.Equal(a.Metric("latency").Rounds, []int{0, 1}) {
		t.Errorf("run-a: %+v, want samples [10 30] in rounds [0 1]", a)
	}
	if b.Run != "run-b" || !slices.Equal(b.Metric("latency").Samples, []float64{20}) {
		t.Errorf("run-b: %+v, want its one sample [20]", b)
	}
}
