package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/mstar-dev/mstar/internal/jsonpos"
)

// TraceFormat is the "format" value on a routing trace's header line.
const TraceFormat = "mstar.routing-trace"

// Trace is a recorded routing: for each of several layers, each token's
// experts and weights. The file format is JSON Lines:
//
//	{"format":"mstar.routing-trace","experts":128,"topk":8}
//	{"layer":0,"ids":[5,17,3,99,42,7,64,1],"weights":[0.31,0.2,0.12,0.1,0.09,0.08,0.06,0.04]}
//	{"layer":0,"ids":[...],"weights":[...]}
//	...
//	{"layer":1,"ids":[...],"weights":[...]}
//
// The first line is the header; every later line is one token at one layer.
// Tokens of a layer are in line order (lines of different layers may
// interleave); every layer must have the same number of tokens. "ids" holds
// exactly topk distinct expert ids in [0, experts); "weights" is optional
// (1/topk each when absent) and otherwise holds one finite number per id.
// Layer numbers are the model's; replay maps the run's i-th layer to the
// trace's i-th smallest layer number. Blank lines are skipped.
//
// A single JSON object {"experts":E,"topk":K,"ids":[[...],...],"weights":[[...],...]}
// (one row per token, one layer) is read as well.
type Trace struct {
	Experts, TopK int
	Layers        []int       // the layer numbers, ascending
	IDs           [][]int32   // per layer: T×TopK
	Weights       [][]float32 // per layer: T×TopK
	Tokens        int
}

type traceHeader struct {
	Format  string `json:"format"`
	Experts int    `json:"experts"`
	TopK    int    `json:"topk"`
}

type traceLine struct {
	Layer   *int      `json:"layer"`
	IDs     []int64   `json:"ids"`
	Weights []float64 `json:"weights"`
}

type traceDoc struct {
	Experts int         `json:"experts"`
	TopK    int         `json:"topk"`
	IDs     [][]int64   `json:"ids"`
	Weights [][]float64 `json:"weights"`
}

// ReadTraceFile reads a routing trace file; errors name the file and line.
func ReadTraceFile(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr, err := ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tr, nil
}

// ReadTrace reads a routing trace in either form described on Trace.
func ReadTrace(r io.Reader) (*Trace, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	first := data
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		first = data[:i]
	}
	var hdr traceHeader
	if json.Unmarshal(first, &hdr) == nil && hdr.Format == TraceFormat {
		return readTraceLines(data, hdr)
	}
	var doc traceDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		if bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) && (errors.As(err, &se) || errors.As(err, &te) || errors.Is(err, io.ErrUnexpectedEOF)) {
			return nil, jsonpos.Error(data, 0, err) // a trace object, malformed
		}
		return nil, fmt.Errorf("line 1: not a routing trace: want a header {\"format\":%q,...} or one JSON object with experts, topk, ids: %v", TraceFormat, err)
	}
	if dec.More() {
		line, col := jsonpos.Position(data, dec.InputOffset())
		return nil, fmt.Errorf("line %d, column %d: unexpected data after the trace object", line, col)
	}
	if err := checkTraceHeader(doc.Experts, doc.TopK); err != nil {
		return nil, err
	}
	if doc.Weights != nil && len(doc.Weights) != len(doc.IDs) {
		return nil, fmt.Errorf("%d rows of weights for %d rows of ids", len(doc.Weights), len(doc.IDs))
	}
	tr := &Trace{Experts: doc.Experts, TopK: doc.TopK, Layers: []int{0}, IDs: make([][]int32, 1), Weights: make([][]float32, 1)}
	for t, ids := range doc.IDs {
		var ws []float64
		if doc.Weights != nil {
			ws = doc.Weights[t]
		}
		if err := tr.appendRow(0, ids, ws); err != nil {
			return nil, fmt.Errorf("row %d: %w", t, err)
		}
	}
	tr.Tokens = len(doc.IDs)
	if tr.Tokens == 0 {
		return nil, fmt.Errorf("trace has no tokens")
	}
	return tr, nil
}

func checkTraceHeader(E, K int) error {
	if E <= 0 {
		return fmt.Errorf("trace header: experts must be positive (got %d)", E)
	}
	if K <= 0 || K > E {
		return fmt.Errorf("trace header: topk %d must be in [1, experts=%d]", K, E)
	}
	return nil
}

func readTraceLines(data []byte, hdr traceHeader) (*Trace, error) {
	if err := checkTraceHeader(hdr.Experts, hdr.TopK); err != nil {
		return nil, fmt.Errorf("line 1: %w", err)
	}
	tr := &Trace{Experts: hdr.Experts, TopK: hdr.TopK}
	byLayer := map[int]int{} // layer number → index in tr.IDs (in order of appearance)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	line := 0
	for sc.Scan() {
		line++
		if line == 1 || len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var tl traceLine
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&tl); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		if tl.Layer == nil || *tl.Layer < 0 {
			return nil, fmt.Errorf("line %d: want a non-negative \"layer\"", line)
		}
		li, ok := byLayer[*tl.Layer]
		if !ok {
			li = len(tr.Layers)
			byLayer[*tl.Layer] = li
			tr.Layers = append(tr.Layers, *tl.Layer)
			tr.IDs = append(tr.IDs, nil)
			tr.Weights = append(tr.Weights, nil)
		}
		if err := tr.appendRow(li, tl.IDs, tl.Weights); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %v", line+1, err)
	}
	if len(tr.Layers) == 0 {
		return nil, fmt.Errorf("trace has a header but no tokens")
	}
	// Sort layers by number, keeping each layer's rows together.
	idx := make([]int, len(tr.Layers))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return tr.Layers[idx[a]] < tr.Layers[idx[b]] })
	layers, ids, ws := make([]int, len(idx)), make([][]int32, len(idx)), make([][]float32, len(idx))
	for i, j := range idx {
		layers[i], ids[i], ws[i] = tr.Layers[j], tr.IDs[j], tr.Weights[j]
	}
	tr.Layers, tr.IDs, tr.Weights = layers, ids, ws
	tr.Tokens = len(tr.IDs[0]) / tr.TopK
	for i, l := range tr.Layers {
		if n := len(tr.IDs[i]) / tr.TopK; n != tr.Tokens {
			return nil, fmt.Errorf("layer %d has %d tokens, layer %d has %d: every layer needs the same tokens", l, n, tr.Layers[0], tr.Tokens)
		}
	}
	return tr, nil
}

func (tr *Trace) appendRow(li int, ids []int64, ws []float64) error {
	if len(ids) != tr.TopK {
		return fmt.Errorf("%d expert ids, want topk=%d", len(ids), tr.TopK)
	}
	if ws != nil && len(ws) != len(ids) {
		return fmt.Errorf("%d weights for %d expert ids", len(ws), len(ids))
	}
	row := tr.IDs[li]
	start := len(row)
	for j, id := range ids {
		if id < 0 || id >= int64(tr.Experts) {
			return fmt.Errorf("expert id %d out of range [0,%d)", id, tr.Experts)
		}
		if containsID(row[start:], int32(id)) {
			return fmt.Errorf("expert id %d appears twice", id)
		}
		row = append(row, int32(id))
		w := 1 / float64(tr.TopK)
		if ws != nil {
			w = ws[j]
			if math.IsNaN(w) || math.IsInf(w, 0) {
				return fmt.Errorf("weight %d is %v", j, w)
			}
		}
		tr.Weights[li] = append(tr.Weights[li], float32(w))
	}
	tr.IDs[li] = row
	return nil
}

// TraceFromOutputs records the outputs of consecutive layers (one batch
// each, the same tokens) as a trace. Dropped and empty slots cannot be
// represented and are an error.
func TraceFromOutputs(E int, outs []Output) (*Trace, error) {
	if len(outs) == 0 {
		return nil, fmt.Errorf("no layers to record")
	}
	tr := &Trace{Experts: E, TopK: outs[0].K, Tokens: outs[0].T}
	for l, o := range outs {
		if o.K != tr.TopK || o.T != tr.Tokens {
			return nil, fmt.Errorf("layer %d is %d×%d, layer 0 %d×%d", l, o.T, o.K, tr.Tokens, tr.TopK)
		}
		for i := range o.IDs {
			if !o.Live(i) {
				return nil, fmt.Errorf("layer %d token %d: a dropped or empty slot cannot be recorded", l, i/o.K)
			}
		}
		tr.Layers = append(tr.Layers, l)
		tr.IDs = append(tr.IDs, append([]int32(nil), o.IDs...))
		tr.Weights = append(tr.Weights, append([]float32(nil), o.Weights...))
	}
	return tr, nil
}

// Write writes the trace in the JSON Lines form.
func (tr *Trace) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	hdr, _ := json.Marshal(traceHeader{Format: TraceFormat, Experts: tr.Experts, TopK: tr.TopK})
	bw.Write(hdr)
	bw.WriteByte('\n')
	for li, l := range tr.Layers {
		for t := 0; t < tr.Tokens; t++ {
			row := struct {
				Layer   int       `json:"layer"`
				IDs     []int32   `json:"ids"`
				Weights []float32 `json:"weights"`
			}{l, tr.IDs[li][t*tr.TopK : (t+1)*tr.TopK], tr.Weights[li][t*tr.TopK : (t+1)*tr.TopK]}
			b, err := json.Marshal(row)
			if err != nil {
				return err
			}
			bw.Write(b)
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

// Replay is a router that returns a recorded trace as is: the run's i-th
// layer gets the trace's i-th layer, tokens Offset … Offset+T−1. Logits are
// ignored (and the trace's K replaces the requested one). Asking for a
// layer or tokens the trace lacks, or a different expert count, is an error.
type Replay struct {
	Trace *Trace
}

func (Replay) Name() string { return "trace" }

func (r Replay) Route(in Input, _ State) (Output, State, error) {
	tr := r.Trace
	switch {
	case in.E != tr.Experts:
		return Output{}, nil, fmt.Errorf("trace routes over %d experts, the run has %d", tr.Experts, in.E)
	case in.Layer < 0 || in.Layer >= len(tr.Layers):
		return Output{}, nil, fmt.Errorf("trace has %d layers, run layer %d asked", len(tr.Layers), in.Layer)
	case in.Offset < 0 || in.Offset+in.T > tr.Tokens:
		return Output{}, nil, fmt.Errorf("trace has %d tokens, run asked for tokens %d…%d", tr.Tokens, in.Offset, in.Offset+in.T-1)
	}
	k := tr.TopK
	out := Output{T: in.T, K: k,
		IDs:     append([]int32(nil), tr.IDs[in.Layer][in.Offset*k:(in.Offset+in.T)*k]...),
		Weights: append([]float32(nil), tr.Weights[in.Layer][in.Offset*k:(in.Offset+in.T)*k]...),
	}
	return out, nil, nil
}
