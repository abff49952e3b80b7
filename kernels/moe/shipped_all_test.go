package moe

import (
	"io/fs"
	"path"
	"strconv"
	"testing"
)

// Every file in kernels/moe/configs, for any device (the H200's and, once
// shipped, others'), is one bench moe would use whole: it parses, its name
// is its key, no batch is stale for this build's kernels, and each batch's
// configuration runs its shape.
func TestEveryShippedFileIsCurrent(t *testing.T) {
	names, err := fs.Glob(ShippedConfigs(), "configs/*.json")
	if err != nil || len(names) == 0 {
		t.Fatalf("no shipped files (%v)", err)
	}
	for _, p := range names {
		b, err := fs.ReadFile(ShippedConfigs(), p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := ParseTunedFile(b, p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if want := f.Key().FileName(); path.Base(p) != want {
			t.Errorf("%s: its key names it %s", p, want)
		}
		n := len(f.Batches)
		got, _, warns, err := TunedLookup{Embedded: ShippedConfigs()}.Find(f.Key())
		if err != nil || got == nil || len(warns) > 0 || len(got.Batches) != n {
			t.Errorf("%s: not used whole by this build (%v %v): re-tune it for these kernels", p, err, warns)
			continue
		}
		s := Shape{E: f.E, K: f.TopK, H: f.K, I: f.N}
		for _, m := range got.TunedBatchSizes() {
			c, err := ParseConfig(got.Batches[strconv.Itoa(m)].Config)
			if err == nil {
				err = CheckConfigShape(c, s, m)
			}
			if err != nil {
				t.Errorf("%s M=%d: %v", p, m, err)
			}
		}
	}
}
