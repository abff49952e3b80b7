package router

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
)

// A safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON mapping tensor names to {"dtype", "shape", "data_offsets": [begin,
// end]} (offsets relative to the byte after the header; an optional
// "__metadata__" entry maps strings to strings), then the tensor bytes,
// little-endian, row-major.

// maxHeader bounds the JSON header a reader will load (the format's own
// implementation refuses headers over 100 MB).
const maxHeader = 100 << 20

// TensorInfo is one tensor's entry in a safetensors header.
type TensorInfo struct {
	Name        string   `json:"-"`
	DType       string   `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

func dtypeSize(dt string) (int, bool) {
	switch dt {
	case "F32":
		return 4, true
	case "F16", "BF16":
		return 2, true
	}
	return 0, false
}

// Safetensors is an open safetensors file. Tensors are read on demand, so
// a multi-gigabyte checkpoint costs only the tensors asked for.
type Safetensors struct {
	path      string
	f         *os.File
	dataStart int64
	Tensors   map[string]TensorInfo
	Metadata  map[string]string
}

// OpenSafetensors opens path and checks its header: the length, the JSON,
// and that every tensor's bytes lie inside the file and match its shape.
func OpenSafetensors(path string) (*Safetensors, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := parseSafetensors(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return st, nil
}

func parseSafetensors(f *os.File, path string) (*Safetensors, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("%s: not a safetensors file: %d bytes, too short for the 8-byte header length", path, size)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxHeader || int64(n) > size-8 {
		return nil, fmt.Errorf("%s: not a safetensors file: header length %d exceeds the file (%d bytes) or the %d-byte limit", path, n, size, maxHeader)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return nil, fmt.Errorf("%s: reading the header: %v", path, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("%s: header is not valid JSON: %v", path, err)
	}
	st := &Safetensors{path: path, f: f, dataStart: 8 + int64(n), Tensors: map[string]TensorInfo{}}
	dataLen := size - st.dataStart
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &st.Metadata); err != nil {
				return nil, fmt.Errorf("%s: __metadata__ is not a map of strings: %v", path, err)
			}
			continue
		}
		var ti TensorInfo
		if err := json.Unmarshal(msg, &ti); err != nil {
			return nil, fmt.Errorf("%s: tensor %s: bad header entry: %v", path, name, err)
		}
		ti.Name = name
		// Checked products: [2^32, 2^32] must not wrap to 0 elements.
		elems := int64(1)
		for _, d := range ti.Shape {
			if d < 0 {
				return nil, fmt.Errorf("%s: tensor %s: negative dimension in shape %v", path, name, ti.Shape)
			}
			if d != 0 && elems > math.MaxInt64/int64(d) {
				return nil, fmt.Errorf("%s: tensor %s: shape %v has more elements than an int64 counts", path, name, ti.Shape)
			}
			elems *= int64(d)
		}
		if sz, ok := dtypeSize(ti.DType); ok && elems > math.MaxInt64/int64(sz) {
			return nil, fmt.Errorf("%s: tensor %s: shape %v of %s is more bytes than an int64 counts", path, name, ti.Shape, ti.DType)
		}
		b, e := ti.DataOffsets[0], ti.DataOffsets[1]
		if b < 0 || e < b || e > dataLen {
			return nil, fmt.Errorf("%s: tensor %s: data_offsets [%d,%d] outside the %d data bytes", path, name, b, e, dataLen)
		}
		if sz, ok := dtypeSize(ti.DType); ok && e-b != elems*int64(sz) {
			return nil, fmt.Errorf("%s: tensor %s: %d bytes for shape %v of %s, want %d", path, name, e-b, ti.Shape, ti.DType, elems*int64(sz))
		}
		st.Tensors[name] = ti
	}
	return st, nil
}

// Close closes the file.
func (s *Safetensors) Close() error { return s.f.Close() }

// Path is the file's path.
func (s *Safetensors) Path() string { return s.path }

// Float32 reads a tensor (F32, F16 or BF16) as float32 values.
func (s *Safetensors) Float32(name string) ([]float32, []int, error) {
	ti, ok := s.Tensors[name]
	if !ok {
		return nil, nil, fmt.Errorf("%s: no tensor named %s", s.path, name)
	}
	if _, ok := dtypeSize(ti.DType); !ok {
		return nil, nil, fmt.Errorf("%s: tensor %s: dtype %s not supported (F32, F16, BF16)", s.path, name, ti.DType)
	}
	buf := make([]byte, ti.DataOffsets[1]-ti.DataOffsets[0])
	if _, err := s.f.ReadAt(buf, s.dataStart+ti.DataOffsets[0]); err != nil {
		return nil, nil, fmt.Errorf("%s: tensor %s: %v", s.path, name, err)
	}
	var out []float32
	switch ti.DType {
	case "F32":
		out = make([]float32, len(buf)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
	case "BF16":
		out = make([]float32, len(buf)/2)
		for i := range out {
			out[i] = BF16ToFloat32(binary.LittleEndian.Uint16(buf[2*i:]))
		}
	case "F16":
		out = make([]float32, len(buf)/2)
		for i := range out {
			out[i] = F16ToFloat32(binary.LittleEndian.Uint16(buf[2*i:]))
		}
	}
	return out, append([]int(nil), ti.Shape...), nil
}

// Tensor is a named tensor for WriteSafetensors.
type Tensor struct {
	Name  string
	DType string // F32, F16 or BF16 (values are rounded to nearest even)
	Shape []int
	Data  []float32
}

// WriteSafetensors writes tensors in the safetensors format, in the order
// given, for tests and for making small gate files.
func WriteSafetensors(w io.Writer, tensors []Tensor) error {
	hdr := map[string]TensorInfo{}
	var off int64
	for _, t := range tensors {
		sz, ok := dtypeSize(t.DType)
		if !ok {
			return fmt.Errorf("tensor %s: dtype %s not supported (F32, F16, BF16)", t.Name, t.DType)
		}
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		if n != len(t.Data) {
			return fmt.Errorf("tensor %s: shape %v holds %d values, data has %d", t.Name, t.Shape, n, len(t.Data))
		}
		hdr[t.Name] = TensorInfo{DType: t.DType, Shape: t.Shape, DataOffsets: [2]int64{off, off + int64(n*sz)}}
		off += int64(n * sz)
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	for len(js)%8 != 0 { // the reference writer pads the header with spaces
		js = append(js, ' ')
	}
	buf := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	buf = append(buf, js...)
	for _, t := range tensors {
		for _, v := range t.Data {
			switch t.DType {
			case "F32":
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			case "BF16":
				buf = binary.LittleEndian.AppendUint16(buf, Float32ToBF16(v))
			case "F16":
				buf = binary.LittleEndian.AppendUint16(buf, Float32ToF16(v))
			}
		}
	}
	_, err = w.Write(buf)
	return err
}

// BF16ToFloat32 widens bfloat16 bits.
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToBF16 rounds to the nearest bfloat16, ties to even; NaN stays NaN.
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F16ToFloat32 widens IEEE half-precision bits, subnormals included.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, nan
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: man · 2^−24
		v := float32(man) * float32(math.Ldexp(1, -24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// Float32ToF16 rounds to the nearest half, ties to even, overflowing to ±inf.
func Float32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	a := math.Abs(float64(f))
	switch {
	case math.IsNaN(float64(f)):
		return sign | 0x7e00
	case a >= 65520: // rounds past the largest half (65504)
		return sign | 0x7c00
	case a < math.Ldexp(1, -14): // subnormal or zero: units of 2^−24
		return sign | uint16(math.RoundToEven(a*math.Ldexp(1, 24)))
	}
	exp := int(u>>23&0xff) - 127
	man := u & 0x7fffff
	h := uint32(exp+15)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || rest == 0x1000 && h&1 == 1 {
		h++ // may carry into the exponent, which is the right answer
	}
	return sign | uint16(h)
}

// GateSet is the router weights of several layers of a model.
type GateSet struct {
	Layers []int       // the model's layer numbers
	Gates  [][]float32 // [E×H] per layer
	Biases [][]float32 // [E] per layer, nil where the model has none
	Source string
}

// Tensor names of gate weights and DeepSeek-V3's correction bias. Mixtral
// names its MoE block "block_sparse_moe".
var gateName = regexp.MustCompile(`^model\.layers\.(\d+)\.(mlp|block_sparse_moe)\.gate\.weight$`)

// GateTensorName is the tensor holding a layer's gate weights in
// Qwen/DeepSeek checkpoints.
func GateTensorName(layer int) string { return fmt.Sprintf("model.layers.%d.mlp.gate.weight", layer) }

// BiasTensorName is the tensor holding DeepSeek-V3's e_score_correction_bias.
func BiasTensorName(layer int) string {
	return fmt.Sprintf("model.layers.%d.mlp.gate.e_score_correction_bias", layer)
}

// LoadGates reads gate weights [E×H] (and the correction bias where there
// is one) from a safetensors file, or from every *.safetensors file of a
// directory (a sharded checkpoint). layers names the model layers to read;
// when it is empty, the first n layers that have a gate are read, in layer
// order. A missing tensor or a shape other than [E,H] (bias: [E]) is an
// error naming the tensor.
func LoadGates(path string, E, H int, layers []int, n int) (*GateSet, error) {
	files, err := safetensorsFiles(path)
	if err != nil {
		return nil, err
	}
	where := map[string]*Safetensors{}
	var opened []*Safetensors
	defer func() {
		for _, s := range opened {
			s.Close()
		}
	}()
	for _, p := range files {
		s, err := OpenSafetensors(p)
		if err != nil {
			return nil, err
		}
		opened = append(opened, s)
		for name := range s.Tensors {
			where[name] = s
		}
	}
	type gateRef struct {
		layer int
		name  string
	}
	var refs []gateRef
	if len(layers) > 0 {
		for _, l := range layers {
			name := GateTensorName(l)
			if alt := fmt.Sprintf("model.layers.%d.block_sparse_moe.gate.weight", l); where[name] == nil && where[alt] != nil {
				name = alt
			}
			if where[name] == nil {
				return nil, fmt.Errorf("%s: no tensor named %s (layer %d's gate)", path, name, l)
			}
			refs = append(refs, gateRef{l, name})
		}
	} else {
		for name := range where {
			if m := gateName.FindStringSubmatch(name); m != nil {
				l, _ := strconv.Atoi(m[1])
				refs = append(refs, gateRef{l, name})
			}
		}
		sort.Slice(refs, func(i, j int) bool { return refs[i].layer < refs[j].layer })
		if len(refs) < n {
			return nil, fmt.Errorf("%s: %d gate tensors (named like %s), want %d layers", path, len(refs), GateTensorName(0), n)
		}
		refs = refs[:n]
	}
	gs := &GateSet{Source: path}
	for _, r := range refs {
		s := where[r.name]
		g, shape, err := s.Float32(r.name)
		if err != nil {
			return nil, err
		}
		if len(shape) != 2 || shape[0] != E || shape[1] != H {
			return nil, fmt.Errorf("%s: tensor %s has shape %v, want [%d %d] (experts × hidden)", s.path, r.name, shape, E, H)
		}
		var bias []float32
		if bs := where[BiasTensorName(r.layer)]; bs != nil {
			b, shape, err := bs.Float32(BiasTensorName(r.layer))
			if err != nil {
				return nil, err
			}
			if len(shape) != 1 || shape[0] != E {
				return nil, fmt.Errorf("%s: tensor %s has shape %v, want [%d] (experts)", bs.path, BiasTensorName(r.layer), shape, E)
			}
			bias = b
		}
		gs.Layers = append(gs.Layers, r.layer)
		gs.Gates = append(gs.Gates, g)
		gs.Biases = append(gs.Biases, bias)
	}
	return gs, nil
}

func safetensorsFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	files, err := filepath.Glob(filepath.Join(path, "*.safetensors"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no *.safetensors files in the directory", path)
	}
	sort.Strings(files)
	return files, nil
}
