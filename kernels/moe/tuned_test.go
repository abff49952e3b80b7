package moe

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

var updateShipped = flag.Bool("update", false, "regenerate kernels/moe/configs from the static table (ChooseConfig)")

// shippedShapes are the local shapes of the four reference sweeps, whose
// H200 files ship in configs/.
var shippedShapes = []struct {
	name  string
	shape Shape
}{
	{"qwen3-30b-a3b", Shape{E: 128, K: 8, H: 2048, I: 768}},
	{"qwen3-235b-a22b", Shape{E: 128, K: 8, H: 4096, I: 1536}},
	{"deepseek-v3 --tp 8", Shape{E: 256, K: 8, H: 7168, I: 256}},
	{"mixtral-8x7b", Shape{E: 8, K: 2, H: 4096, I: 14336}},
}

// shippedBatches is bench's default GPU sweep.
var shippedBatches = []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}

const shippedDevice = "NVIDIA H200"

// The shipped files are for this moe.cu, cover the default sweep of the four
// reference shapes, and every configuration in them can run its batch. With
// -update they are regenerated from the static table (a placeholder until
// files tuned on the H200 replace them).
func TestShippedConfigs(t *testing.T) {
	if *updateShipped {
		now := time.Now().UTC().Truncate(time.Second)
		for _, s := range shippedShapes {
			key := KeyFor(s.shape, shippedDevice)
			if b, err := os.ReadFile(filepath.Join("configs", key.FileName())); err == nil {
				if old, err := ParseTunedFile(b, key.FileName()); err == nil && measured(old) {
					// Tuned on the GPU: only a new tune may replace it.
					t.Errorf("%s: configs/%s was tuned on the GPU (kernels %s): re-tune it there (scripts/moe-tune-configs-h200.sh) instead of regenerating it from the static table",
						s.name, key.FileName(), old.KernelVersion)
					continue
				}
			}
			f := NewTunedFile(key, now)
			f.Note = s.name + ": generated from the static table (ChooseConfig), not measured; replace with 'mstar tune moe' output from the H200"
			for _, m := range shippedBatches {
				c := ChooseConfig(s.shape, m)
				f.Set(m, TunedBatch{Config: c.String(), Static: c.String(), Date: now})
			}
			if _, err := WriteTunedFile("configs", f); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range shippedShapes {
		key := KeyFor(s.shape, shippedDevice)
		f, where, warns, err := TunedLookup{Embedded: ShippedConfigs()}.Find(key)
		if err != nil || f == nil {
			t.Errorf("%s: no usable shipped file %s (%v; %v): after changing moe.cu, re-tune on the H200 and copy the files into kernels/moe/configs, or regenerate the placeholders with 'go test ./kernels/moe -run TestShippedConfigs -update'",
				s.name, key.FileName(), err, warns)
			continue
		}
		if where != "embedded configs/"+key.FileName() {
			t.Errorf("%s: found at %q", s.name, where)
		}
		for _, m := range shippedBatches {
			p := f.PickFor(s.shape, m, Uniform)
			c := p.Config
			if c.Kernel == "" || !p.Exact {
				t.Errorf("%s M=%d: picked %+v, want the file's own batch", s.name, m, p)
			}
			if err := CheckConfigShape(c, s.shape, m); err != nil {
				t.Errorf("%s M=%d: %v", s.name, m, err)
			}
			// The file names the kernels as results will (Split's canonical
			// name), so a result and its file agree.
			if got := f.Batches[strconv.Itoa(m)].Config; got != c.String() {
				t.Errorf("%s M=%d: the file says %q, which runs as %q", s.name, m, got, c.String())
			}
			// Each batch names the kernels its candidates compiled from; a
			// base-tagged batch with a wg candidate today would outlive a
			// wg change it should be re-tuned for.
			if got, want := f.Batches[strconv.Itoa(m)].Kernels, BatchKernels(CandidatesOn(Hopper, s.shape, m)); got != want {
				t.Errorf("%s M=%d: tuned for kernels %q, its candidates compile from %q", s.name, m, got, want)
			}
		}
	}
}

// measured reports whether a file holds timings (tuned on a device), as
// opposed to the static table's placeholders.
func measured(f *TunedFile) bool {
	for _, b := range f.Batches {
		if b.LatencyUS > 0 {
			return true
		}
	}
	return false
}

func TestTunedLookupOrderAndInvalidation(t *testing.T) {
	s := Shape{E: 8, K: 2, H: 64, I: 32}
	key := KeyFor(s, "Fake GPU 9000")
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	mk := func(cfg string, version string) []byte {
		f := NewTunedFile(key, now)
		f.KernelVersion = version
		f.Set(16, TunedBatch{Config: cfg, Date: now})
		b, err := f.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	emb := fstest.MapFS{"configs/" + key.FileName(): {Data: mk("tc:32x256k64s3", KernelVersion)}}
	user := t.TempDir()

	// Only the embedded file: it is used.
	l := TunedLookup{Dirs: []string{user}, Embedded: emb}
	f, where, warns, err := l.Find(key)
	if err != nil || f == nil || where != "embedded configs/"+key.FileName() || len(warns) != 0 {
		t.Fatalf("embedded only: %v %q %v %v", f, where, warns, err)
	}
	// A user file wins over the embedded one.
	os.WriteFile(filepath.Join(user, key.FileName()), mk("skinny:nt=2", KernelVersion), 0o644)
	f, where, _, _ = l.Find(key)
	if f == nil || where != "file "+filepath.Join(user, key.FileName()) || f.Batches["16"].Config != "skinny:nt=2" {
		t.Fatalf("user file: %v from %q", f, where)
	}
	// A user file of another moe.cu is ignored, saying so, and the embedded one applies.
	os.WriteFile(filepath.Join(user, key.FileName()), mk("skinny:nt=2", "moe.cu-000000000000"), 0o644)
	f, where, warns, _ = l.Find(key)
	if f == nil || !strings.HasPrefix(where, "embedded") || len(warns) != 1 ||
		!strings.Contains(warns[0], "tuned for kernels moe.cu-000000000000, this build's are "+KernelVersion+" (moe.cu changed)") {
		t.Fatalf("stale user file: %v from %q, warnings %q", f, where, warns)
	}
	// A malformed one too.
	os.WriteFile(filepath.Join(user, key.FileName()), []byte(`{"format": "mstar.moe-configs", "E": 8,`), 0o644)
	if f, _, warns, _ = l.Find(key); f == nil || len(warns) != 1 || !strings.Contains(warns[0], "ignored tuned config file") {
		t.Fatalf("malformed user file: %v, warnings %q", f, warns)
	}
	// Another device: nothing, no warnings.
	if f, _, warns, _ := l.Find(KeyFor(s, "Other GPU")); f != nil || len(warns) != 0 {
		t.Errorf("other device: %v %v", f, warns)
	}
}

func TestTunedPickNearest(t *testing.T) {
	s := Shape{E: 128, K: 8, H: 2048, I: 768}
	f := NewTunedFile(KeyFor(s, "x"), time.Now())
	f.Set(64, TunedBatch{Config: "tc:32x256k64s3", Date: time.Now()})
	f.Set(1024, TunedBatch{Config: "tc:128x256k64s3", Date: time.Now()})
	for _, tt := range []struct {
		m          int
		want, note string
	}{
		{64, "tc:bm=32,bn=256,bk=64,wm=1,wn=4,stages=3,gm=8,minb=1", ""},
		{100, "tc:bm=32,bn=256,bk=64,wm=1,wn=4,stages=3,gm=8,minb=1", "nearest tuned batch 64 (M=100 not tuned)"},
		{600, "tc:bm=128,bn=256,bk=64,wm=2,wn=4,stages=3,gm=8,minb=1", "nearest tuned batch 1024 (M=600 not tuned)"},
		{4096, "auto", "M=4096 not tuned and no tuned batch within 2×: static table"},
		{8, "auto", "M=8 not tuned and no tuned batch within 2×: static table"},
	} {
		p := f.PickFor(s, tt.m, Uniform)
		if p.Config.String() != tt.want || p.Note != tt.note || p.Exact != (tt.m == 64) {
			t.Errorf("M=%d: %+v, want %s (%q)", tt.m, p, tt.want, tt.note)
		}
	}
	// Round trip, batches in numeric order.
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if i, j := strings.Index(string(b), `"64"`), strings.Index(string(b), `"1024"`); i < 0 || j < i {
		t.Errorf("batches not in numeric order:\n%s", b)
	}
	g, err := ParseTunedFile(b, "x")
	if err != nil || len(g.Batches) != 2 || g.Batches["1024"].Config != "tc:128x256k64s3" {
		t.Errorf("round trip: %+v %v", g, err)
	}
	// A file with a configuration this build cannot read is refused.
	if _, err := ParseTunedFile([]byte(strings.Replace(string(b), "tc:32x256k64s3", "tc:bk=48", 1)), "bad.json"); err == nil || !strings.Contains(err.Error(), "batch 64") {
		t.Errorf("bad config: %v", err)
	}
}

// The base version covers moe.cu less its wgmma section: an edit inside the
// section changes only the full version, one outside changes both.
func TestBaseKernelVersion(t *testing.T) {
	if withoutSection(Source, wgSectionBegin, wgSectionEnd) == Source {
		t.Fatalf("moe.cu has no %q … %q section: BaseKernelVersion would equal the whole file's", wgSectionBegin, wgSectionEnd)
	}
	if base := withoutSection(Source, wgSectionBegin, wgSectionEnd); strings.Contains(base, "wgmma.mma_async") || !strings.Contains(base, "moe_combine") {
		t.Errorf("the base source keeps wgmma code or lost the rest")
	}
	i := strings.Index(Source, wgSectionBegin) + len(wgSectionBegin)
	inside := Source[:i] + "// edit\n" + Source[i:]
	if sourceVersion(inside, true, false) == KernelVersion || sourceVersion(inside, false, false) != BaseKernelVersion {
		t.Errorf("an edit inside the wg section: full %s, base %s", sourceVersion(inside, true, false), sourceVersion(inside, false, false))
	}
	outside := "// edit\n" + Source
	if sourceVersion(outside, true, false) == KernelVersion || sourceVersion(outside, false, false) == BaseKernelVersion {
		t.Errorf("an edit outside it: full %s, base %s", sourceVersion(outside, true, false), sourceVersion(outside, false, false))
	}
	if noMarks := "x"; sourceVersion(noMarks, false, false) == sourceVersion("y", false, false) {
		t.Errorf("without the markers the base version ignores edits")
	}
	s := Shape{E: 128, K: 8, H: 2048, I: 768}
	if got := BatchKernels(CandidatesOn(Hopper, s, 1)); got != BaseKernelVersion {
		t.Errorf("M=1 on Hopper: %s, want the base version (no wg candidate)", got)
	}
	if got := BatchKernels(CandidatesOn(Hopper, s, 4096)); got != KernelVersion {
		t.Errorf("M=4096 on Hopper: %s, want the full version", got)
	}
	if got := BatchKernels([]Config{Split(tcTable["16x256k64s4"], wgTable["128x256s4"])}); got != KernelVersion {
		t.Errorf("a tc+wg split: %s", got)
	}
}

// The gv section is hashed apart: an edit inside it changes only the
// versions of batches with a gv candidate, one inside the wgmma section only
// those with a wg candidate, one elsewhere all four; a batch names the gv
// section when a gv configuration (or half of a split) was a candidate.
func TestGVKernelVersion(t *testing.T) {
	if withoutSection(Source, gvSectionBegin, gvSectionEnd) == Source {
		t.Fatalf("moe.cu has no %q … %q section", gvSectionBegin, gvSectionEnd)
	}
	if rest := withoutSection(Source, gvSectionBegin, gvSectionEnd); strings.Contains(rest, "moe_gemm1_skinny_nt1_gv") || !strings.Contains(rest, "moe_gemm1_skinny_nt1_w16_sa") {
		t.Errorf("the source less the gv section keeps gv kernels or lost the skinny ones")
	}
	versions := func(src string) [4]string {
		return [4]string{sourceVersion(src, true, false), sourceVersion(src, false, false), sourceVersion(src, false, true), sourceVersion(src, true, true)}
	}
	now := versions(Source)
	if now != [4]string{KernelVersion, BaseKernelVersion, GVKernelVersion, WGGVKernelVersion} {
		t.Fatalf("versions %q", now)
	}
	i := strings.Index(Source, gvSectionBegin) + len(gvSectionBegin)
	inGV := versions(Source[:i] + "// edit\n" + Source[i:])
	if inGV[0] != now[0] || inGV[1] != now[1] || inGV[2] == now[2] || inGV[3] == now[3] {
		t.Errorf("an edit inside the gv section: %q, was %q", inGV, now)
	}
	j := strings.Index(Source, wgSectionBegin) + len(wgSectionBegin)
	inWG := versions(Source[:j] + "// edit\n" + Source[j:])
	if inWG[0] == now[0] || inWG[1] != now[1] || inWG[2] != now[2] || inWG[3] == now[3] {
		t.Errorf("an edit inside the wg section: %q, was %q", inWG, now)
	}
	out := versions("// edit\n" + Source)
	for k := range out {
		if out[k] == now[k] {
			t.Errorf("an edit outside both sections kept version %d: %s", k, out[k])
		}
	}
	gv := Config{Kernel: "skinny", NT: 1, GV: 1}
	for _, tt := range []struct {
		cands []Config
		want  string
	}{
		{[]Config{{Kernel: "skinny", NT: 1}, gv}, GVKernelVersion},
		{[]Config{Split(tcTable["16x256k64s4"], gv)}, GVKernelVersion},
		{[]Config{gv, wgTable["128x256s4"]}, WGGVKernelVersion},
	} {
		if got := BatchKernels(tt.cands); got != tt.want {
			t.Errorf("%v: %s, want %s", tt.cands, got, tt.want)
		}
	}
	// A file's batch tuned with a gv candidate is kept by the lookup.
	if !currentKernels(GVKernelVersion) || !currentKernels(WGGVKernelVersion) || currentKernels(sourceVersion("other", false, true)) {
		t.Errorf("currentKernels does not take exactly this build's gv versions")
	}
}

// A file whose wgmma kernels changed keeps the batches that had no wg
// candidate and drops the others, saying which.
func TestTunedLookupDropsStaleBatches(t *testing.T) {
	s := Shape{E: 8, K: 2, H: 64, I: 32}
	key := KeyFor(s, "Fake GPU 9000")
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	f := NewTunedFile(key, now)
	f.KernelVersion = "moe.cu-000000000000" // the build that wrote it
	f.Set(1, TunedBatch{Config: "skinny:nt=1", Date: now, Kernels: BaseKernelVersion})
	f.Set(2, TunedBatch{Config: "skinny:nt=2", Date: now, Kernels: KernelVersion})
	f.Set(512, TunedBatch{Config: "wg:128x256s4", Date: now, Kernels: "moe.cu-000000000000"})
	f.Set(1024, TunedBatch{Config: "wg:128x256s4", Date: now}) // older files: the file's version
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, _, warns, _ := TunedLookup{Embedded: fstest.MapFS{"configs/" + key.FileName(): {Data: b}}}.Find(key)
	if got == nil {
		t.Fatalf("file dropped whole: %q", warns)
	}
	if sizes := got.TunedBatchSizes(); len(sizes) != 2 || sizes[0] != 1 || sizes[1] != 2 {
		t.Errorf("kept batches %v, want [1 2]", sizes)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "ignored M=512,1024 of tuned config file") ||
		!strings.Contains(warns[0], "moe.cu-000000000000") {
		t.Errorf("warnings %q", warns)
	}
	// Every batch stale: the file is ignored as a whole, as before.
	f.Batches = nil
	f.Set(512, TunedBatch{Config: "wg:128x256s4", Date: now})
	b, _ = f.Marshal()
	if got, _, warns, _ = (TunedLookup{Embedded: fstest.MapFS{"configs/" + key.FileName(): {Data: b}}}).Find(key); got != nil ||
		len(warns) != 1 || !strings.Contains(warns[0], "ignored tuned config file") {
		t.Errorf("all stale: %v, %q", got, warns)
	}
}

// Batches tuned under a skewed routing sit beside the uniform ones: each
// routing's run picks its own, round trip through the file included; a
// routing with no entry for a batch falls back to the uniform pick.
func TestTunedFileRoutings(t *testing.T) {
	s := Shape{E: 8, K: 2, H: 64, I: 32}
	key := KeyFor(s, "Fake GPU 9000")
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	f := NewTunedFile(key, now)
	f.Set(16, TunedBatch{Config: "skinny:nt=1", Date: now, Routing: "uniform"})
	f.Set(256, TunedBatch{Config: "skinny:nt=2", Date: now})
	f.Set(256, TunedBatch{Config: "skinny:nt=4", Date: now, Routing: "zipf:1.20"})
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"routings": {`) || !strings.Contains(string(b), `"zipf:1.2": {`) {
		t.Fatalf("marshalled file has no zipf:1.2 routing:\n%s", b)
	}
	got, err := ParseTunedFile(b, "x")
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != 3 || !slicesEqual(got.TunedRoutings(), []string{"uniform", "zipf:1.2"}) {
		t.Fatalf("parsed: %d batches, routings %v; want 3 and [uniform zipf:1.2]", got.Len(), got.TunedRoutings())
	}
	for _, tt := range []struct {
		m             int
		routing, want string
		under         string
	}{
		{256, "uniform", "skinny:nt=2", "uniform"},
		{256, "", "skinny:nt=2", "uniform"},
		{256, "zipf:1.2", "skinny:nt=4", "zipf:1.2"},
		{256, "Zipf:1.200", "skinny:nt=4", "zipf:1.2"},
		{256, "zipf:0.8", "skinny:nt=2", "uniform"},
		{16, "zipf:1.2", "skinny:nt=1", "uniform"}, // no zipf entry: the uniform one
	} {
		p := got.PickFor(s, tt.m, tt.routing)
		if p.Config.String() != mustParse(t, tt.want).String() || !p.Exact || p.Routing != tt.under {
			t.Errorf("PickFor(M=%d, %q) = %+v, want %s tuned under %s", tt.m, tt.routing, p, tt.want, tt.under)
		}
	}
	if again, _ := got.Marshal(); string(again) != string(b) {
		t.Errorf("round trip changed the file:\n%s\nwas\n%s", again, b)
	}
}

// A file written before Routings kept a skewed tune's batch among the
// uniform ones: it moves to its routing, so uniform runs no longer take it.
// Malformed routings are refused, and stale batches go per routing.
func TestTunedFileRoutingsOnRead(t *testing.T) {
	old := `{"format":"mstar.moe-configs","E":8,"N":32,"K":64,"topk":2,"dtype":"bf16","device":"X","kernel_version":"` + KernelVersion + `",
"created":"2026-12-01T00:00:00Z","updated":"2026-12-01T00:00:00Z","batches":{
"256":{"config":"skinny:nt=4","date":"2026-12-01T00:00:00Z","routing":"zipf:1.2"},
"16":{"config":"skinny:nt=1","date":"2026-12-01T00:00:00Z","routing":"uniform"}}}`
	f, err := ParseTunedFile([]byte(old), "old")
	if err != nil {
		t.Fatal(err)
	}
	// An entry of routings without its own routing field takes the key's.
	noField := strings.Replace(old, `"batches":{`, `"routings":{"trace:a.jsonl":{"8":{"config":"skinny:nt=1","date":"2026-12-01T00:00:00Z"}}},"batches":{`, 1)
	if g, err := ParseTunedFile([]byte(noField), "nofield"); err != nil {
		t.Errorf("routing entry without its field: %v", err)
	} else if b, _ := g.Get(8, "trace:a.jsonl"); b.Routing != "trace:a.jsonl" {
		t.Errorf("routing entry without its field reads routing %q", b.Routing)
	}
	if f.Has(256, Uniform) || !f.Has(256, "zipf:1.2") || !f.Has(16, Uniform) {
		t.Errorf("after reading: uniform %v, zipf:1.2 %v; want [16] and [256]", f.TunedBatchSizes(), f.TunedBatchSizesUnder("zipf:1.2"))
	}
	for _, bad := range []struct{ routings, want string }{
		{`{"uniform":{"8":{"config":"skinny:nt=1","date":"2026-12-01T00:00:00Z","routing":"uniform"}}}`, `uniform batches go in "batches"`},
		{`{"zipf:1.20":{"8":{"config":"skinny:nt=1","date":"2026-12-01T00:00:00Z","routing":"zipf:1.20"}}}`, `"zipf:1.20": want "zipf:1.2"`},
		{`{"zipf:abc":{"8":{"config":"skinny:nt=1","date":"2026-12-01T00:00:00Z","routing":"zipf:abc"}}}`, `"zipf:abc": want zipf:ALPHA`},
		{`{"zipf:0":{"8":{"config":"skinny:nt=1","date":"2026-12-01T00:00:00Z","routing":"zipf:0"}}}`, `"zipf:0": want zipf:ALPHA`},
		{`{"trace:":{"8":{"config":"skinny:nt=1","date":"2026-12-01T00:00:00Z","routing":"trace:"}}}`, `"trace:": want`},
		{`{"zipf:1.2":{"8":{"config":"skinny:nt=1","date":"2026-12-01T00:00:00Z","routing":"zipf:2"}}}`, `tuned under "zipf:2"`},
		{`{"zipf:1.2":{"0":{"config":"skinny:nt=1","date":"2026-12-01T00:00:00Z","routing":"zipf:1.2"}}}`, `not a positive token count`},
		{`{"zipf:1.2":{"8":{"config":"warp:9","date":"2026-12-01T00:00:00Z","routing":"zipf:1.2"}}}`, `routing zipf:1.2 batch 8`},
	} {
		doc := strings.Replace(old, `"batches":{`, `"routings":`+bad.routings+`,"batches":{`, 1)
		if _, err := ParseTunedFile([]byte(doc), "bad"); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("routings %s: err %v, want one with %q", bad.routings, err, bad.want)
		}
	}

	key := f.Key()
	f.Set(512, TunedBatch{Config: "skinny:nt=1", Date: time.Now(), Routing: "zipf:1.2", Kernels: "moe.cu-000000000000"})
	b, _ := f.Marshal()
	got, _, warns, _ := TunedLookup{Embedded: fstest.MapFS{"configs/" + key.FileName(): {Data: b}}}.Find(key)
	if got == nil || got.Has(512, "zipf:1.2") || !got.Has(256, "zipf:1.2") {
		t.Fatalf("stale zipf batch: file %v, warnings %q", got, warns)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "ignored M=512@zipf:1.2 of tuned config file") {
		t.Errorf("warnings %q, want one naming M=512@zipf:1.2", warns)
	}
}

// A truncated or mistyped file says where.
func TestParseTunedFileSaysWhere(t *testing.T) {
	for doc, want := range map[string]string{
		"{\"format\": \"mstar.moe-configs\",\n \"E\": 8,\n \"batches\": {\"2\": ": "line 3, column 19: unexpected end of input",
		"{\"format\": \"mstar.moe-configs\",\n \"E\": \"eight\"}":                 "line 2, column",
	} {
		if _, err := ParseTunedFile([]byte(doc), "f.json"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want one with %q", doc, err, want)
		}
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "|") == strings.Join(b, "|") }

func mustParse(t *testing.T, s string) Config {
	t.Helper()
	c, err := ParseConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCanonicalRouting(t *testing.T) {
	for in, want := range map[string]string{"": "uniform", " Uniform ": "uniform", "zipf:1.20": "zipf:1.2", "ZIPF:2": "zipf:2",
		"zipf:0.5e1": "zipf:5", "trace:A.json": "trace:A.json", "zipf:x": "zipf:x"} {
		if got := CanonicalRouting(in); got != want {
			t.Errorf("CanonicalRouting(%q) = %q, want %q", in, got, want)
		}
	}
}

// Under expert parallelism a run's batches have their own key (routing
// "@epN"): a rank of E/N experts sees N× fewer slots per token than a model
// without EP whose local shape is the same, so neither takes the other's
// picks, the nearest-batch fallback included; the keys survive the file.
func TestTunedFileEPRoutings(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"", "1"}: "uniform", {"Uniform", "4"}: "uniform@ep4", {"zipf:1.20", "8"}: "zipf:1.2@ep8",
		{"trace:a.jsonl", "2"}: "trace:a.jsonl@ep2",
	} {
		ep, _ := strconv.Atoi(in[1])
		if got := TunedRouting(in[0], ep); got != want {
			t.Errorf("TunedRouting(%q, %d) = %q, want %q", in[0], ep, got, want)
		}
	}
	for in, want := range map[string]string{
		"uniform@ep1": "uniform", "zipf:1.20@ep4": "zipf:1.2@ep4", "trace:a@epoch.json": "trace:a@epoch.json",
	} {
		if got := CanonicalRouting(in); got != want {
			t.Errorf("CanonicalRouting(%q) = %q, want %q", in, got, want)
		}
	}
	for key, want := range map[string]string{
		"uniform@ep4": "", "zipf:1.2@ep4": "", "trace:a@epoch.json": "", "trace:a.jsonl@ep2": "",
		"uniform@ep1": "want zipf:ALPHA", "uniform@ep0": "want zipf:ALPHA", "zipf:1.20@ep4": `want "zipf:1.2@ep4"`,
		"zipf:0@ep4": "want zipf:ALPHA",
	} {
		err := checkRoutingKey(key)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("checkRoutingKey(%q) = %v, want %q", key, err, want)
		}
	}

	s := Shape{E: 8, K: 2, H: 64, I: 32}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	f := NewTunedFile(KeyFor(s, "Fake GPU 9000"), now)
	f.Set(64, TunedBatch{Config: "skinny:nt=1", Date: now})
	f.Set(64, TunedBatch{Config: "skinny:nt=2", Date: now, Routing: TunedRouting("", 4)})
	f.Set(128, TunedBatch{Config: "skinny:nt=4", Date: now, Routing: TunedRouting("", 4)})
	f.Set(256, TunedBatch{Config: "tc:bm=16,bn=128,bk=128,wm=1,wn=4,stages=3,gm=8,minb=2,ov=2", Date: now, Routing: TunedRouting("zipf:1.2", 4)})
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseTunedFile(b, "x")
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	for _, tt := range []struct {
		m                    int
		routing, want, under string
		exact                bool
	}{
		{64, "uniform", "skinny:nt=1", "uniform", true},
		{64, "uniform@ep4", "skinny:nt=2", "uniform@ep4", true},
		{64, "zipf:1.2@ep4", "skinny:nt=2", "uniform@ep4", true},
		{256, "zipf:1.2@ep4", "tc:bm=16,bn=128,bk=128,wm=1,wn=4,stages=3,gm=8,minb=2,ov=2", "zipf:1.2@ep4", true},
		{100, "uniform@ep4", "skinny:nt=4", "uniform@ep4", false}, // nearest: 128, not uniform's 64
		{128, "uniform", "skinny:nt=1", "uniform", false},         // nearest: 64, not ep4's 128
		{64, "uniform@ep8", "", "", false},                        // none under ep8: the static table
	} {
		p := got.PickFor(s, tt.m, tt.routing)
		if tt.want == "" {
			if p.Config.Kernel != "" || !strings.Contains(p.Note, "not tuned under uniform@ep8") {
				t.Errorf("PickFor(M=%d, %q) = %+v, want the static table with a note naming uniform@ep8", tt.m, tt.routing, p)
			}
			continue
		}
		if p.Config.String() != mustParse(t, tt.want).String() || p.Exact != tt.exact || p.Routing != tt.under {
			t.Errorf("PickFor(M=%d, %q) = %+v, want %s tuned under %s (exact %v)", tt.m, tt.routing, p, tt.want, tt.under, tt.exact)
		}
	}
	if again, _ := got.Marshal(); string(again) != string(b) {
		t.Errorf("round trip changed the file:\n%s\nwas\n%s", again, b)
	}
}
