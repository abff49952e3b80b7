package results

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	d := fixture("gpu-a", 1)
	if err := WriteFile(path, d); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, d) {
		t.Errorf("read back a different document:\nwant %+v\ngot  %+v", d, got)
	}
	// No temporary file is left next to it.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("folder holds %d entries after WriteFile, want 1", len(ents))
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
}

func TestWriteFileRefusesInvalid(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Document)
		want string
	}{
		{"zero metric is not unmeasured", func(d *Document) { d.Results[0].Metrics[0].Samples = nil }, "neither samples nor an unmeasured reason"},
		{"NaN sample", func(d *Document) { d.Results[0].Metrics[0].Samples[2] = nan() }, "sample 2 is NaN"},
		{"negative time", func(d *Document) { d.Results[0].Metrics[0].Samples[1] = -3 }, "sample 1 is -3 us: a time cannot be negative"},
		{"no format", func(d *Document) { d.Format = "" }, "not an mstar results document"},
		{"bad direction", func(d *Document) { d.Results[1].Metrics[0].Better = "up" }, `direction "up"`},
		{"duplicate metric", func(d *Document) { d.Results[0].Metrics[1].Name = "latency" }, `metric "latency" appears twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := fixture("gpu-a", 1)
			tc.edit(d)
			err := WriteFile(path, d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("WriteFile error = %v, want it to contain %q", err, tc.want)
			}
			if b, _ := os.ReadFile(path); string(b) != "old" {
				t.Errorf("a refused write changed the file to %q", b)
			}
		})
	}
}

func TestNewDocumentFinish(t *testing.T) {
	args := []string{"mstar", "bench", "moe"}
	d := NewDocument("bench moe", args, Env{"host": "h"})
	args[0] = "changed"
	if d.Format != Format || d.Schema != SchemaVersion || d.Suite != "bench moe" || d.Command[0] != "mstar" {
		t.Errorf("NewDocument = %+v", d)
	}
	if d.Start.IsZero() || !d.End.IsZero() {
		t.Errorf("Start %v End %v: want Start set, End zero", d.Start, d.End)
	}
	d.Finish()
	if d.End.Before(d.Start) {
		t.Errorf("End %v before Start %v", d.End, d.Start)
	}
	var b bytes.Buffer
	if err := Write(&b, d); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(&b, "x"); err != nil {
		t.Errorf("reading a new empty document: %v", err)
	}
}

func TestReadErrors(t *testing.T) {
	var whole bytes.Buffer
	if err := Write(&whole, fixture("gpu-a", 1)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in string
		want     string // the whole error
	}{
		{"empty", "", "reading in.json: empty file"},
		{"blank", " \n\t\n", "reading in.json: empty file"},
		{"syntax", "{\n  \"format\": \"mstar.results\",\n  \"schema\": 1,,\n}", "reading in.json: line 3, column 15: invalid character ',' looking for beginning of object key string"},
		{"truncated", "{\n  \"format\": \"mstar.res", "reading in.json: line 2, column 23: unexpected end of input (truncated file?)"},
		{"trailing data", `{"format":"mstar.results","schema":1}` + "\n}", "reading in.json: line 2, column 1: invalid character '}' after top-level value"},
		{"wrong type", "{\"format\": \"mstar.results\",\n\"schema\": \"one\"}", "reading in.json: line 2, column 15: field schema: expected an integer, found string"},
		{"number out of range", "{\"format\": \"mstar.results\",\n\"schema\": 1e999}", "reading in.json: line 2, column 15: field schema: 1e999 is out of range for an integer"},
		{"binary", "\x00\x00", "reading in.json: binary data: the first byte is NUL, and this format is text"},
		{"array", "[1, 2]", "reading in.json: line 1, column 1: the document: expected an object, found array"},
		{"bad time", "{\"format\": \"mstar.results\", \"schema\": 1, \"start\": \"yesterday\"}", `reading in.json: line 1: parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"`},
		{"schema", `{"format":"mstar.results","schema":2}`, "reading in.json: unsupported schema version 2 (this mstar reads version 1)"},
		{"not ours", `{"name":"x"}`, `reading in.json: not an mstar results document (format "", want "mstar.results")`},
		{"invalid result", `{"format":"mstar.results","schema":1,"results":[{"name":"x","metrics":[{"name":"m","unit":"s","better":"lower"}]}]}`, `reading in.json: result "x": metric "m" has neither samples nor an unmeasured reason`},
		{"two documents", whole.String() + whole.String(), fmt.Sprintf("reading in.json: line %d, column 1: invalid character '{' after top-level value", strings.Count(whole.String(), "\n")+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Read(strings.NewReader(tc.in), "in.json")
			if err == nil {
				t.Fatalf("read %+v, want error %q", d, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error (-want +got):\n-%s\n+%s", tc.want, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestReadFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.json")
	_, err := ReadFile(path)
	want := "reading " + path + ": no such file or directory"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

func TestReadBOMAndCRLF(t *testing.T) {
	var b bytes.Buffer
	d := fixture("gpu-a", 1)
	if err := Write(&b, d); err != nil {
		t.Fatal(err)
	}
	crlf := strings.ReplaceAll(b.String(), "\n", "\r\n")
	got, err := Read(strings.NewReader("\xef\xbb\xbf"+crlf), "bom.json")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, d) {
		t.Errorf("BOM/CRLF document read differently")
	}
}

// A gzipped document reads like the plain one; a corrupt gzip stream and one
// that expands past the input limit are refused.
func TestReadGzipped(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "doc.json")
	d := fixture("gpu-a", 1)
	if err := WriteFile(plain, d); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(plain)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(raw)
	zw.Close()
	gz := filepath.Join(dir, "doc.json.gz")
	os.WriteFile(gz, z.Bytes(), 0o644)
	got, err := ReadFile(gz)
	if err != nil || !reflect.DeepEqual(got, d) {
		t.Fatalf("ReadFile(gz) = %+v, %v; want the plain document", got, err)
	}
	bad := append(append([]byte{}, z.Bytes()[:len(z.Bytes())/2]...), 0xff, 0xff)
	os.WriteFile(gz, bad, 0o644)
	if _, err := ReadFile(gz); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("torn gzip: %v, want a gzip error", err)
	}
	t.Setenv("MSTAR_MAX_INPUT", "64")
	os.WriteFile(gz, z.Bytes(), 0o644)
	if _, err := ReadFile(gz); err == nil {
		t.Errorf("a gzip expanding past MSTAR_MAX_INPUT=64 was read")
	}
}

// A results path that is a symlink is written through to its target; the
// link stays.
func TestWriteFileAtomicFollowsSymlink(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target.json"), filepath.Join(dir, "link.json")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("no symlinks here: %v", err)
	}
	if err := WriteFileAtomic(link, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "{}" {
		t.Errorf("target holds %q, want the written bytes", b)
	}
}
