package results

import (
	"bytes"
	"strings"
	"testing"
)

// checkAccepted is the property both fuzz targets hold: an input is either
// rejected with a one-line error, or accepted and then survives a round trip
// through both written forms unchanged.
func checkAccepted(t *testing.T, data []byte) {
	d, err := Read(bytes.NewReader(data), "fuzz.json")
	if err != nil {
		if strings.Contains(err.Error(), "\n") {
			t.Fatalf("error spans lines: %q", err)
		}
		return
	}
	var w1 bytes.Buffer
	if err := Write(&w1, d); err != nil {
		t.Fatalf("accepted document does not write: %v", err)
	}
	d2, err := Read(bytes.NewReader(w1.Bytes()), "rewritten.json")
	if err != nil {
		t.Fatalf("written document does not read back: %v\n%s", err, w1.Bytes())
	}
	var w2 bytes.Buffer
	if err := Write(&w2, d2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w1.Bytes(), w2.Bytes()) {
		t.Fatalf("round trip changed the document:\n%s\n---\n%s", w1.Bytes(), w2.Bytes())
	}
	// The same document through the streaming form. A stream is one run's
	// results as they finished, where a key that comes again is the next
	// round: results of one run that share a key come back joined, as the
	// run's own whole document would hold them.
	s := streamOf(t, d2)
	d3, err := Read(bytes.NewReader(s), "rewritten.ndjson")
	if err != nil {
		t.Fatalf("streamed document does not read back: %v\n%s", err, s)
	}
	if d2.End.IsZero() {
		d3.End = d2.End // Close records an end that was missing
	}
	want := *d2
	want.Results = joinRepeats(d2.Results)
	var w3, wWant bytes.Buffer
	if err := Write(&w3, d3); err != nil {
		t.Fatal(err)
	}
	if err := Write(&wWant, &want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(wWant.Bytes(), w3.Bytes()) {
		t.Fatalf("stream round trip changed the document:\n%s\n---\n%s", wWant.Bytes(), w3.Bytes())
	}
}

func FuzzRead(f *testing.F) {
	var whole bytes.Buffer
	if err := Write(&whole, fixture("gpu-a", 1)); err != nil {
		f.Fatal(err)
	}
	f.Add(whole.Bytes())
	// Two results of one run with one key (found by CI's fuzzing): the
	// streaming form reads them back as two rounds of one result.
	twice := fixture("gpu-a", 1)
	twice.Results[1].Params = nil
	twice.Results[0].Params, twice.Results[0].Metrics = nil, nil
	whole.Reset()
	if err := Write(&whole, twice); err != nil {
		f.Fatal(err)
	}
	f.Add(whole.Bytes())
	f.Add([]byte(`{"format":"mstar.results","schema":1,"suite":"s","command":null,"start":"2026-11-30T08:00:00Z","end":"0001-01-01T00:00:00Z","env":null,"results":null}`))
	f.Add([]byte(`{"format":"mstar.results","schema":1,"results":[{"name":"x","params":{"a":"1"},"env":{"host":"b"},"metrics":[{"name":"m","unit":"s","better":"lower","samples":[1,2.5e-3,-0]},{"name":"u","unit":"","better":"higher","unmeasured":"why"}],"gates":[{"name":"g","pass":false,"reason":"r"}]}]}`))
	f.Add([]byte(`{"format":"mstar.results","schema":2}`))
	f.Add([]byte("{\n  \"format\": \"mstar.results\",\n  \"schema\": 1,,\n}"))
	f.Add([]byte(""))
	f.Add([]byte("\xef\xbb\xbf{}"))
	f.Add([]byte("[1,2]"))
	f.Fuzz(checkAccepted)
}

func FuzzReadStream(f *testing.F) {
	s := streamOf(f, fixture("gpu-a", 1))
	f.Add(s)
	lines := bytes.SplitAfter(s, []byte("\n"))
	f.Add(bytes.Join(lines[:2], nil))                          // no footer
	f.Add(append(append([]byte(nil), lines[0]...), "\n\n"...)) // header only
	f.Add([]byte(`{"record":"header","format":"mstar.results","schema":1}` + "\n" + `{"record":"footer","end":"2026-11-30T08:00:00Z","warnings":["w"]}` + "\n"))
	f.Add([]byte(`{"record":"header","format":"mstar.results","schema":1}` + "\n" + `{"record":"result","result":{"name":"x","metrics":[{"name":"m","unit":"s","better":"lower","samples":[1]}]}}`))
	f.Add([]byte(`{"record":"header","format":"mstar.results","schema":1}` + "\n" + `{"record":"result","result":{]` + "\n"))
	f.Add([]byte(`{"record":"header"}` + "\r\n" + `{"record":"footer"}` + "\r\n"))
	f.Fuzz(checkAccepted)
}
