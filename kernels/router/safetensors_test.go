package router

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestHalfConversions(t *testing.T) {
	tests := []struct {
		name string
		f    float32
		f16  uint16
		bf16 uint16
	}{
		{"one", 1, 0x3c00, 0x3f80},
		{"minus two", -2, 0xc000, 0xc000},
		{"zero", 0, 0, 0},
		// 0.1 = 0x3dcccccd: half rounds 0x2e66 (0.0999755859375), bf16 rounds up to 0x3dcd.
		{"one tenth", 0.1, 0x2e66, 0x3dcd},
		{"largest half", 65504, 0x7bff, 0x4780},
		{"half overflow", 65520, 0x7c00, 0x4780},
		{"smallest half subnormal", float32(math.Ldexp(1, -24)), 0x0001, 0x3380},
		{"smallest half normal", float32(math.Ldexp(1, -14)), 0x0400, 0x3880},
		{"infinity", float32(math.Inf(1)), 0x7c00, 0x7f80},
		// 1 + 2^-11 is halfway between two halves: ties to even (down to 1).
		{"half tie to even", 1 + float32(math.Ldexp(1, -11)), 0x3c00, 0x3f80},
		// 1 + 3·2^-11 is halfway, odd below: rounds up.
		{"half tie up", 1 + 3*float32(math.Ldexp(1, -11)), 0x3c02, 0x3f80},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Float32ToF16(tc.f); got != tc.f16 {
				t.Errorf("Float32ToF16(%v) = %#04x, want %#04x", tc.f, got, tc.f16)
			}
			if got := Float32ToBF16(tc.f); got != tc.bf16 {
				t.Errorf("Float32ToBF16(%v) = %#04x, want %#04x", tc.f, got, tc.bf16)
			}
		})
	}
	// Every half except NaNs survives widening and narrowing.
	for h := 0; h < 1<<16; h++ {
		f := F16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := Float32ToF16(f); back != uint16(h) {
			t.Fatalf("half %#04x → %v → %#04x", h, f, back)
		}
	}
	if !math.IsNaN(float64(F16ToFloat32(0x7e00))) || !math.IsNaN(float64(BF16ToFloat32(Float32ToBF16(float32(math.NaN()))))) {
		t.Errorf("NaN did not survive")
	}
}

func writeST(t *testing.T, dir, name string, tensors []Tensor) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSafetensors(&buf, tensors); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSafetensorsRoundTrip(t *testing.T) {
	// Values exactly representable in every dtype.
	data := []float32{1, -2, 0.5, 0.25, 3, -0.125}
	dir := t.TempDir()
	for _, dt := range []string{"F32", "F16", "BF16"} {
		t.Run(dt, func(t *testing.T) {
			p := writeST(t, dir, dt+".safetensors", []Tensor{
				{Name: "a", DType: dt, Shape: []int{2, 3}, Data: data},
				{Name: "b", DType: dt, Shape: []int{1}, Data: []float32{7}},
			})
			st, err := OpenSafetensors(p)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			got, shape, err := st.Float32("a")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, data) || !reflect.DeepEqual(shape, []int{2, 3}) {
				t.Errorf("a = %v %v, want %v [2 3]", got, shape, data)
			}
			if got, _, _ := st.Float32("b"); !reflect.DeepEqual(got, []float32{7}) {
				t.Errorf("b = %v, want [7]", got)
			}
		})
	}
}

// rawST builds a safetensors file from a literal header and data bytes.
func rawST(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestSafetensorsBadFiles(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"too short", []byte{1, 2, 3}, "too short for the 8-byte header length"},
		{"header past the end", rawST(`{}`, nil)[:9], "header length 2 exceeds the file"},
		{"not json", rawST(`{"a":`, nil), "header is not valid JSON"},
		{"offsets outside the data", rawST(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 4)),
			"tensor w: data_offsets [0,8] outside the 4 data bytes"},
		{"size does not match the shape", rawST(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)),
			"tensor w: 8 bytes for shape [3] of F32, want 12"},
		{"bad metadata", rawST(`{"__metadata__":{"a":1}}`, nil), "__metadata__ is not a map of strings"},
		// 2^32 x 2^32 wrapped to 0 elements, so 0 bytes matched it.
		{"shape overflows", rawST(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil),
			"more elements than an int64 counts"},
		{"bytes overflow", rawST(`{"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}}`, nil),
			"more bytes than an int64 counts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			os.WriteFile(p, tc.data, 0o644)
			_, err := OpenSafetensors(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %v, want one naming %s and containing %q", err, p, tc.want)
			}
		})
	}
	p := filepath.Join(dir, "i64")
	os.WriteFile(p, rawST(`{"n":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, make([]byte, 8)), 0o644)
	st, err := OpenSafetensors(p)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, _, err := st.Float32("n"); err == nil || !strings.Contains(err.Error(), "tensor n: dtype I64 not supported") {
		t.Errorf("I64 tensor: %v", err)
	}
}

func TestLoadGates(t *testing.T) {
	const E, H = 4, 3
	gate := func(l int) []float32 {
		g := make([]float32, E*H)
		for i := range g {
			g[i] = float32(l) + float32(i)/16
		}
		return g
	}
	dir := t.TempDir()
	file := writeST(t, dir, "model.safetensors", []Tensor{
		{Name: GateTensorName(5), DType: "BF16", Shape: []int{E, H}, Data: gate(5)},
		{Name: GateTensorName(3), DType: "F32", Shape: []int{E, H}, Data: gate(3)},
		{Name: BiasTensorName(3), DType: "F32", Shape: []int{E}, Data: []float32{0.5, 0, 0, -0.5}},
		{Name: "model.layers.3.mlp.experts.0.up_proj.weight", DType: "F16", Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}},
	})
	gs, err := LoadGates(file, E, H, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gs.Layers, []int{3, 5}) {
		t.Errorf("layers %v, want [3 5] in layer order", gs.Layers)
	}
	if !reflect.DeepEqual(gs.Gates[0], gate(3)) || !reflect.DeepEqual(gs.Gates[1], gate(5)) {
		t.Errorf("gate values differ from those written")
	}
	if !reflect.DeepEqual(gs.Biases[0], []float32{0.5, 0, 0, -0.5}) || gs.Biases[1] != nil {
		t.Errorf("biases %v, want layer 3's and none for layer 5", gs.Biases)
	}

	// A sharded checkpoint: the same tensors spread over a directory.
	shards := t.TempDir()
	writeST(t, shards, "model-00001-of-00002.safetensors", []Tensor{{Name: GateTensorName(3), DType: "F32", Shape: []int{E, H}, Data: gate(3)}})
	writeST(t, shards, "model-00002-of-00002.safetensors", []Tensor{{Name: "model.layers.9.block_sparse_moe.gate.weight", DType: "F32", Shape: []int{E, H}, Data: gate(9)}})
	gs, err = LoadGates(shards, E, H, []int{9, 3}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gs.Layers, []int{9, 3}) || !reflect.DeepEqual(gs.Gates[0], gate(9)) {
		t.Errorf("explicit layers from shards: %v", gs.Layers)
	}

	bad := writeST(t, dir, "bad.safetensors", []Tensor{
		{Name: GateTensorName(0), DType: "F32", Shape: []int{H, E}, Data: gate(0)},
		{Name: GateTensorName(1), DType: "F32", Shape: []int{E, H}, Data: gate(1)},
		{Name: BiasTensorName(1), DType: "F32", Shape: []int{E + 1}, Data: make([]float32, E+1)},
	})
	errs := []struct {
		name   string
		path   string
		layers []int
		n      int
		want   string
	}{
		{"missing tensor", file, []int{4}, 0, "no tensor named model.layers.4.mlp.gate.weight"},
		{"too few gate layers", file, nil, 3, "2 gate tensors (named like model.layers.0.mlp.gate.weight), want 3 layers"},
		{"wrong shape", bad, []int{0}, 0, "tensor model.layers.0.mlp.gate.weight has shape [3 4], want [4 3]"},
		{"wrong bias shape", bad, []int{1}, 0, "tensor model.layers.1.mlp.gate.e_score_correction_bias has shape [5], want [4]"},
		{"no such file", filepath.Join(dir, "nope"), nil, 1, "no such file"},
		{"directory without safetensors", t.TempDir(), nil, 1, "no *.safetensors files"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadGates(tc.path, E, H, tc.layers, tc.n)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
