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
	"slices"
	"sort"

	"github.com/mstar-dev/mstar/internal/jsonpos"
	"github.com/mstar-dev/mstar/internal/limits"
	"github.com/mstar-dev/mstar/kernels/routing"
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
// (1/topk each when absent) and otherwise holds one finite number per id
// (negative ones are read, with a warning in Warnings);
// "dropped" is optional too and marks the slots a router dropped for
// capacity (routing.Routing.Dropped: named, weighing 0, computing nothing).
// Layer numbers are the model's; replay maps the run's i-th layer to the
// trace's i-th smallest layer number. Blank lines are skipped.
//
// A single JSON object {"experts":E,"topk":K,"ids":[[...],...],"weights":[[...],...]}
// (one row per token, one layer; "dropped" likewise), what 'mstar route'
// prints, is read as well.
type Trace struct {
	Experts, TopK int
	Layers        []int             // the layer numbers, ascending
	Routings      []routing.Routing // per layer, the same tokens, TopK slots each
	// Warnings name what the file holds that replays but is likely a
	// mistake (negative weights), for the commands that read it to print.
	Warnings []string
}

// Tokens is the number of tokens every layer holds.
func (tr *Trace) Tokens() int {
	if len(tr.Routings) == 0 {
		return 0
	}
	return tr.Routings[0].M
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
	Dropped []bool    `json:"dropped"`
}

type traceDoc struct {
	Experts int         `json:"experts"`
	TopK    int         `json:"topk"`
	IDs     [][]int64   `json:"ids"`
	Weights [][]float64 `json:"weights"`
	Dropped [][]bool    `json:"dropped"`
}

// ReadTraceFile reads a routing trace file; errors and warnings name the
// file and line.
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
	for i, w := range tr.Warnings {
		tr.Warnings[i] = path + ": " + w
	}
	return tr, nil
}

// ReadTrace reads a routing trace in either form described on Trace.
func ReadTrace(r io.Reader) (*Trace, error) {
	data, err := limits.ReadAll(r, true)
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
	if err := jsonpos.NullError(data, 0, "an expert id, weight or flag"); err != nil {
		return nil, err
	}
	if err := checkTraceHeader(doc.Experts, doc.TopK); err != nil {
		return nil, err
	}
	if doc.Weights != nil && len(doc.Weights) != len(doc.IDs) {
		return nil, fmt.Errorf("%d rows of weights for %d rows of ids", len(doc.Weights), len(doc.IDs))
	}
	if doc.Dropped != nil && len(doc.Dropped) != len(doc.IDs) {
		return nil, fmt.Errorf("%d rows of dropped for %d rows of ids", len(doc.Dropped), len(doc.IDs))
	}
	tr := &Trace{Experts: doc.Experts, TopK: doc.TopK, Layers: []int{0}, Routings: []routing.Routing{{K: doc.TopK}}}
	var neg negatives
	for t, ids := range doc.IDs {
		var ws []float64
		var dropped []bool
		if doc.Weights != nil {
			ws = doc.Weights[t]
		}
		if doc.Dropped != nil {
			dropped = doc.Dropped[t]
		}
		if err := tr.appendRow(0, ids, ws, dropped); err != nil {
			return nil, fmt.Errorf("row %d: %w", t, err)
		}
		neg.see(ws, func() string { return fmt.Sprintf("token %d", t) })
	}
	if tr.Tokens() == 0 {
		return nil, fmt.Errorf("trace has no tokens")
	}
	tr.Warnings = neg.warnings(tr)
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
	byLayer := map[int]int{} // layer number → index in tr.Routings (in order of appearance)
	var neg negatives
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
			return nil, jsonpos.Error(sc.Bytes(), line-1, err)
		}
		if err := jsonpos.NullError(sc.Bytes(), line-1, "an expert id, weight or flag"); err != nil {
			return nil, err
		}
		if tl.Layer == nil || *tl.Layer < 0 {
			return nil, fmt.Errorf("line %d: want a non-negative \"layer\"", line)
		}
		li, ok := byLayer[*tl.Layer]
		if !ok {
			li = len(tr.Layers)
			byLayer[*tl.Layer] = li
			tr.Layers = append(tr.Layers, *tl.Layer)
			tr.Routings = append(tr.Routings, routing.Routing{K: tr.TopK})
		}
		if err := tr.appendRow(li, tl.IDs, tl.Weights, tl.Dropped); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		neg.see(tl.Weights, func() string {
			return fmt.Sprintf("line %d (layer %d, token %d)", line, *tl.Layer, tr.Routings[li].M-1)
		})
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
	layers, rs := make([]int, len(idx)), make([]routing.Routing, len(idx))
	for i, j := range idx {
		layers[i], rs[i] = tr.Layers[j], tr.Routings[j]
	}
	tr.Layers, tr.Routings = layers, rs
	for i, l := range tr.Layers {
		if n := tr.Routings[i].M; n != tr.Tokens() {
			return nil, fmt.Errorf("layer %d has %d tokens, layer %d has %d: every layer needs the same tokens", l, n, tr.Layers[0], tr.Tokens())
		}
	}
	tr.Warnings = neg.warnings(tr)
	return tr, nil
}

// negatives counts a trace's negative weights. No router gives one (a
// sign flipped, logits saved as weights), but the kernels compute them as
// given, so they are warned of, not refused. NaN and ±Inf cannot be written
// in JSON, and appendRow refuses what overflows float32.
type negatives struct {
	n     int
	first string // where the first is
}

// see counts the negatives among one row's weights; where says where the
// row is, asked only for the first.
func (ng *negatives) see(ws []float64, where func() string) {
	for j, w := range ws {
		if w < 0 {
			if ng.n == 0 {
				ng.first = fmt.Sprintf("%g at %s, slot %d", w, where(), j)
			}
			ng.n++
		}
	}
}

func (ng *negatives) warnings(tr *Trace) []string {
	if ng.n == 0 {
		return nil
	}
	verb := "are"
	if ng.n == 1 {
		verb = "is"
	}
	return []string{fmt.Sprintf("%d of %d weights %s negative, the first %s: a router's weights are never negative, so the trace is likely broken",
		ng.n, len(tr.Routings)*tr.Tokens()*tr.TopK, verb, ng.first)}
}

func (tr *Trace) appendRow(li int, ids []int64, ws []float64, dropped []bool) error {
	if len(ids) != tr.TopK {
		return fmt.Errorf("%d expert ids, want topk=%d", len(ids), tr.TopK)
	}
	if ws != nil && len(ws) != len(ids) {
		return fmt.Errorf("%d weights for %d expert ids", len(ws), len(ids))
	}
	if dropped != nil && len(dropped) != len(ids) {
		return fmt.Errorf("%d dropped flags for %d expert ids", len(dropped), len(ids))
	}
	r := &tr.Routings[li]
	if dropped != nil && r.Dropped == nil {
		r.Dropped = make([]bool, len(r.IDs)) // the rows before had none dropped
	}
	if r.Dropped != nil {
		if dropped == nil {
			dropped = make([]bool, len(ids))
		}
		r.Dropped = append(r.Dropped, dropped...)
	}
	row := r.IDs
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
			// Stored as float32: 1e39 would become +Inf here and be
			// refused only later, far from its line.
			if math.Abs(w) > math.MaxFloat32 {
				return fmt.Errorf("weight %d is %g, outside float32's range (±%g)", j, w, math.MaxFloat32)
			}
		}
		r.Weights = append(r.Weights, float32(w))
	}
	r.IDs = row
	r.M++
	return nil
}

// TraceFromRoutings records the routings of consecutive layers (one batch
// each, the same tokens) as a trace. Dropped and empty slots are not
// recorded: they are an error.
func TraceFromRoutings(E int, rs []routing.Routing) (*Trace, error) {
	if len(rs) == 0 {
		return nil, fmt.Errorf("no layers to record")
	}
	tr := &Trace{Experts: E, TopK: rs[0].K}
	for l, r := range rs {
		if r.K != tr.TopK || r.M != rs[0].M {
			return nil, fmt.Errorf("layer %d is %d×%d, layer 0 %d×%d", l, r.M, r.K, rs[0].M, tr.TopK)
		}
		if err := r.Validate(E); err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
		for i := range r.IDs {
			if !r.Live(i) {
				return nil, fmt.Errorf("layer %d token %d: a dropped or empty slot cannot be recorded", l, i/r.K)
			}
		}
		tr.Layers = append(tr.Layers, l)
		tr.Routings = append(tr.Routings, routing.Routing{M: r.M, K: r.K, IDs: slices.Clone(r.IDs), Weights: slices.Clone(r.Weights)})
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
		r := tr.Routings[li]
		for t := 0; t < r.M; t++ {
			row := struct {
				Layer   int       `json:"layer"`
				IDs     []int32   `json:"ids"`
				Weights []float32 `json:"weights"`
				Dropped []bool    `json:"dropped,omitempty"`
			}{l, r.IDs[t*r.K : (t+1)*r.K], r.Weights[t*r.K : (t+1)*r.K], nil}
			if r.Dropped != nil { // a trace read with drops writes them back
				row.Dropped = r.Dropped[t*r.K : (t+1)*r.K]
			}
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

func (r Replay) Route(in Input, _ State) (routing.Routing, State, error) {
	tr := r.Trace
	switch {
	case in.E != tr.Experts:
		return routing.Routing{}, nil, fmt.Errorf("trace routes over %d experts, the run has %d", tr.Experts, in.E)
	case in.Layer < 0 || in.Layer >= len(tr.Layers):
		return routing.Routing{}, nil, fmt.Errorf("trace has %d layers, run layer %d asked", len(tr.Layers), in.Layer)
	case in.Offset < 0 || in.Offset+in.T > tr.Tokens():
		return routing.Routing{}, nil, fmt.Errorf("trace has %d tokens, run asked for tokens %d…%d", tr.Tokens(), in.Offset, in.Offset+in.T-1)
	}
	part := tr.Routings[in.Layer].Tokens(in.Offset, in.T)
	out := routing.Routing{M: part.M, K: part.K, IDs: slices.Clone(part.IDs), Weights: slices.Clone(part.Weights), Dropped: slices.Clone(part.Dropped)}
	return out, nil, nil
}
