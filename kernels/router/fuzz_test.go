package router

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadTrace: a routing trace is refused with an error or read into a
// trace whose every layer has Tokens x TopK ids in range and finite
// float32 weights.
func FuzzReadTrace(f *testing.F) {
	hdr := `{"format":"mstar.routing-trace","experts":4,"topk":2}` + "\n"
	f.Add([]byte(hdr + `{"layer":0,"ids":[0,1],"weights":[0.6,0.4]}` + "\n"))
	f.Add([]byte(hdr + `{"layer":0,"ids":[0,1],"weights":[1e39,0]}` + "\n"))
	f.Add([]byte(`{"experts":4,"topk":1,"ids":[[3],[0]],"weights":[[1],[1]]}`))
	f.Add([]byte(`{"format":"mstar.routing-trace","experts":2147483647,"topk":2147483647}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadTrace(bytes.NewReader(data))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		for i := range tr.Layers {
			r := tr.Routings[i]
			if r.M != tr.Tokens() || r.K != tr.TopK || len(r.IDs) != r.M*r.K || len(r.Weights) != len(r.IDs) {
				t.Fatalf("layer %d: %d ids, %d weights for %d tokens x topk %d", i, len(r.IDs), len(r.Weights), tr.Tokens(), tr.TopK)
			}
			for j, id := range r.IDs {
				w := float64(r.Weights[j])
				if id < 0 || int(id) >= tr.Experts || math.IsInf(w, 0) || math.IsNaN(w) {
					t.Fatalf("layer %d slot %d: id %d (experts %d), weight %v", i, j, id, tr.Experts, w)
				}
			}
		}
	})
}

// FuzzSafetensors: a file is refused, or every tensor it lists reads as
// exactly the elements its shape says, without a panic.
func FuzzSafetensors(f *testing.F) {
	f.Add(rawST(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(rawST(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil))
	f.Add(rawST(`{"w":{"dtype":"BF16","shape":[3,1],"data_offsets":[0,6]},"__metadata__":{"a":"b"}}`, make([]byte, 6)))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "f.safetensors")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := OpenSafetensors(p)
		if err != nil {
			return
		}
		defer st.Close()
		for name, ti := range st.Tensors {
			vals, shape, err := st.Float32(name)
			if err != nil {
				continue
			}
			n := 1
			for _, d := range shape {
				n *= d
			}
			if len(vals) != n {
				t.Fatalf("tensor %s (%v): %d values for shape %v", name, ti.DType, len(vals), shape)
			}
		}
	})
}
