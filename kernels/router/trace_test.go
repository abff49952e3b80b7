package router

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/kernels/routing"
)

func TestTraceRoundTripAndReplay(t *testing.T) {
	outs := []routing.Routing{
		{M: 3, K: 2, IDs: []int32{0, 1, 2, 3, 1, 0}, Weights: []float32{0.75, 0.25, 0.5, 0.5, 1, 0}},
		{M: 3, K: 2, IDs: []int32{3, 2, 1, 0, 2, 1}, Weights: []float32{0.5, 0.5, 0.5, 0.5, 0.5, 0.5}},
	}
	tr, err := TraceFromRoutings(4, outs)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tr.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 1+2*3 {
		t.Errorf("%d lines, want a header and one per token per layer (7):\n%s", lines, buf.String())
	}
	back, err := ReadTrace(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, tr) {
		t.Errorf("round trip (-want +got):\n-%+v\n+%+v", tr, back)
	}
	// Replay tokens 1..2 of layer 1.
	out, _, err := Replay{back}.Route(Input{T: 2, E: 4, K: 2, Layer: 1, Offset: 1, Logits: make([]float32, 8)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{1, 0, 2, 1}; !reflect.DeepEqual(out.IDs, want) {
		t.Errorf("replayed ids %v, want %v", out.IDs, want)
	}
	for _, tc := range []struct {
		in   Input
		want string
	}{
		{Input{T: 2, E: 4, K: 2, Layer: 2}, "trace has 2 layers, run layer 2 asked"},
		{Input{T: 3, E: 4, K: 2, Offset: 1}, "trace has 3 tokens, run asked for tokens 1…3"},
		{Input{T: 1, E: 8, K: 2}, "trace routes over 4 experts, the run has 8"},
	} {
		if _, _, err := (Replay{back}).Route(tc.in, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("replay %+v: %v, want %q", tc.in, err, tc.want)
		}
	}
	if _, err := TraceFromRoutings(4, []routing.Routing{{M: 1, K: 1, IDs: []int32{-1}, Weights: []float32{0}}}); err == nil {
		t.Errorf("an empty slot was recorded")
	}
}

func TestReadTrace(t *testing.T) {
	hdr := `{"format":"mstar.routing-trace","experts":4,"topk":2}` + "\n"
	tests := []struct {
		name   string
		text   string
		layers []int
		ids    [][]int32
		ws     [][]float32
		want   string // error substring
	}{
		{name: "interleaved layers, sorted by number, weights optional",
			text:   hdr + `{"layer":7,"ids":[0,1],"weights":[0.6,0.4]}` + "\n\n" + `{"layer":2,"ids":[3,2]}` + "\n" + `{"layer":7,"ids":[2,3],"weights":[0.5,0.5]}` + "\n" + `{"layer":2,"ids":[1,0]}` + "\n",
			layers: []int{2, 7}, ids: [][]int32{{3, 2, 1, 0}, {0, 1, 2, 3}}, ws: [][]float32{{0.5, 0.5, 0.5, 0.5}, {0.6, 0.4, 0.5, 0.5}}},
		{name: "single-object form (bench moe's routing trace)",
			text:   `{"experts":4,"topk":1,"ids":[[3],[0]],"weights":[[1],[1]]}`,
			layers: []int{0}, ids: [][]int32{{3, 0}}, ws: [][]float32{{1, 1}}},
		{name: "out-of-range expert id", text: hdr + `{"layer":0,"ids":[0,1]}` + "\n" + `{"layer":0,"ids":[4,1]}`, want: "line 3: expert id 4 out of range [0,4)"},
		{name: "negative expert id", text: hdr + `{"layer":0,"ids":[-1,1]}`, want: "line 2: expert id -1 out of range [0,4)"},
		{name: "repeated id", text: hdr + `{"layer":0,"ids":[2,2]}`, want: "line 2: expert id 2 appears twice"},
		{name: "wrong count", text: hdr + `{"layer":0,"ids":[2]}`, want: "line 2: 1 expert ids, want topk=2"},
		{name: "weight outside float32", text: hdr + `{"layer":0,"ids":[0,1]}` + "\n" + `{"layer":0,"ids":[0,1],"weights":[1e39,0]}`, want: "line 3: weight 0 is 1e+39, outside float32's range"},
		{name: "weights count", text: hdr + `{"layer":0,"ids":[0,1],"weights":[1]}`, want: "line 2: 1 weights for 2 expert ids"},
		{name: "malformed line", text: hdr + `{"layer":0,"ids":[0,1]` + "\n", want: "line 2, column 23: unexpected end of input"},
		{name: "null id", text: hdr + `{"layer":0,"ids":[1,null]}`, want: "line 2, column 21: null where an expert id, weight or flag belongs"},
		{name: "object: null weight", text: `{"experts":4,"topk":1,"ids":[[3]],"weights":[[null]]}`, want: "line 1, column 47: null where"},
		{name: "unknown field", text: hdr + `{"layer":0,"ids":[0,1],"experts":[1]}`, want: `line 2: json: unknown field "experts"`},
		{name: "no layer", text: hdr + `{"ids":[0,1]}`, want: `line 2: want a non-negative "layer"`},
		{name: "uneven layers", text: hdr + `{"layer":0,"ids":[0,1]}` + "\n" + `{"layer":1,"ids":[0,1]}` + "\n" + `{"layer":1,"ids":[0,1]}`, want: "layer 1 has 2 tokens, layer 0 has 1: every layer needs the same tokens"},
		{name: "topk above experts", text: `{"format":"mstar.routing-trace","experts":2,"topk":3}`, want: "line 1: trace header: topk 3 must be in [1, experts=2]"},
		{name: "header only", text: hdr, want: "no tokens"},
		{name: "not a trace", text: `[1,2,3]`, want: "line 1: not a routing trace"},
		// The one-object form (bench moe's before JSON Lines) says where it is malformed.
		{name: "object: syntax error line 3", text: "{\"experts\": 4,\n\"topk\": 2,\n\"ids\": [[0, 1]],,\n}", want: "line 3, column 17:"},
		{name: "object: wrong type", text: "{\"experts\": \"four\"}", want: "line 1, column 18:"},
		{name: "object: trailing data", text: "{\"experts\": 4, \"topk\": 1, \"ids\": [[1]]}\n{}", want: "line 2"},
		{name: "single object with a bad id", text: `{"experts":4,"topk":1,"ids":[[3],[9]]}`, want: "row 1: expert id 9 out of range [0,4)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadTrace(strings.NewReader(tc.text))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids [][]int32
			var ws [][]float32
			for _, r := range tr.Routings {
				ids, ws = append(ids, r.IDs), append(ws, r.Weights)
			}
			if !reflect.DeepEqual(tr.Layers, tc.layers) || !reflect.DeepEqual(ids, tc.ids) || !reflect.DeepEqual(ws, tc.ws) {
				t.Errorf("(-want +got):\n-%v %v %v\n+%v %v %v", tc.layers, tc.ids, tc.ws, tr.Layers, ids, ws)
			}
		})
	}
}

func TestWorkload(t *testing.T) {
	const E, H, T = 8, 64, 4000
	gates := [][]float32{RandomGate(E, H, 1, 0), RandomGate(E, H, 1, 1)}
	t.Run("correlation 1 keeps co-routed tokens together", func(t *testing.T) {
		_, pref, err := Workload{Tokens: T, Alpha: 1, Strength: 3, Correlation: 1, Seed: 2}.Hidden(gates, E, H)
		if err != nil {
			t.Fatal(err)
		}
		// Layer 0's preferred expert determines layer 1's: one image per expert.
		img := map[int32]int32{}
		for tok := range pref[0] {
			if prev, ok := img[pref[0][tok]]; ok && prev != pref[1][tok] {
				t.Fatalf("tokens preferring expert %d at layer 0 split at layer 1", pref[0][tok])
			}
			img[pref[0][tok]] = pref[1][tok]
		}
	})
	t.Run("correlation 0 does not", func(t *testing.T) {
		_, pref, _ := Workload{Tokens: T, Alpha: 1, Strength: 3, Correlation: 0, Seed: 2}.Hidden(gates, E, H)
		img := map[int32]map[int32]bool{}
		for tok := range pref[0] {
			if img[pref[0][tok]] == nil {
				img[pref[0][tok]] = map[int32]bool{}
			}
			img[pref[0][tok]][pref[1][tok]] = true
		}
		if len(img[pref[0][0]]) < 2 {
			t.Errorf("independent layers kept every token's expert")
		}
	})
	t.Run("zipf affinity: rank 1 is about 1/H_E of tokens", func(t *testing.T) {
		_, pref, _ := Workload{Tokens: T, Alpha: 1, Strength: 3, Seed: 3}.Hidden(gates[:1], E, H)
		count := make([]int, E)
		for _, e := range pref[0] {
			count[e]++
		}
		mx := 0
		for _, c := range count {
			mx = max(mx, c)
		}
		// P(rank 1) = 1 / (1 + 1/2 + … + 1/8) = 0.368.
		if f := float64(mx) / T; f < 0.33 || f > 0.41 {
			t.Errorf("hottest expert preferred by %.3f of tokens, want ≈ 0.368", f)
		}
	})
	t.Run("strength raises the preferred expert's logit", func(t *testing.T) {
		hid, pref, _ := Workload{Tokens: T, Alpha: 0, Strength: 4, Seed: 4}.Hidden(gates[:1], E, H)
		lg := Logits(hid[0], T, H, gates[0], E)
		top := 0
		for tok := 0; tok < T; tok++ {
			ids := make([]int32, 1)
			row := make([]float64, E)
			for e := range row {
				row[e] = float64(lg[tok*E+e])
			}
			topK(ids, row, nil)
			if ids[0] == pref[0][tok] {
				top++
			}
		}
		if f := float64(top) / T; f < 0.9 {
			t.Errorf("preferred expert has the top logit for %.2f of tokens, want most (a 4σ boost)", f)
		}
	})
	for _, w := range []Workload{{Tokens: 0}, {Tokens: 1, Alpha: -1}, {Tokens: 1, Correlation: 2}, {Tokens: 1, Strength: -1}} {
		if err := w.Validate(); err == nil {
			t.Errorf("%+v validated", w)
		}
	}
}

func TestLogitsMatchesFloat64(t *testing.T) {
	const T, H, E = 5, 37, 3
	x := RandomGate(T, H, 1, 0)
	g := RandomGate(E, H, 2, 0)
	got := Logits(x, T, H, g, E)
	for tok := 0; tok < T; tok++ {
		for e := 0; e < E; e++ {
			var want float64
			for h := 0; h < H; h++ {
				want += float64(x[tok*H+h]) * float64(g[e*H+h])
			}
			if d := float64(got[tok*E+e]) - want; d > 1e-5 || d < -1e-5 {
				t.Errorf("logit[%d][%d] = %v, want %v", tok, e, got[tok*E+e], want)
			}
		}
	}
}

// A negative weight replays, but is warned of with the count and where the
// first one is; NaN and ±Inf cannot get in.
func TestReadTraceNegativeWeights(t *testing.T) {
	hdr := `{"format":"mstar.routing-trace","experts":4,"topk":2}` + "\n"
	for _, tc := range []struct {
		name, text, want string
	}{
		{"clean, weights not summing to 1", hdr + `{"layer":0,"ids":[0,1],"weights":[0.9,0.7]}` + "\n" + `{"layer":0,"ids":[2,3],"weights":[0,-0]}`, ""},
		{"clean, no weights", hdr + `{"layer":0,"ids":[0,1]}`, ""},
		{"lines", hdr + `{"layer":3,"ids":[0,1],"weights":[0.5,0.5]}` + "\n" + `{"layer":1,"ids":[0,1],"weights":[0.5,0.5]}` + "\n" +
			`{"layer":3,"ids":[2,3],"weights":[1.25,-0.25]}` + "\n" + `{"layer":1,"ids":[2,3],"weights":[-1,-2]}`,
			"3 of 8 weights are negative, the first -0.25 at line 4 (layer 3, token 1), slot 1: a router's weights are never negative"},
		{"object", `{"experts":4,"topk":2,"ids":[[0,1],[2,3]],"weights":[[1,0],[0.5,-0.5]]}`,
			"1 of 4 weights is negative, the first -0.5 at token 1, slot 1: a router's weights are never negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := ReadTrace(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if tr.Warnings != nil {
					t.Errorf("warnings for a clean trace: %q", tr.Warnings)
				}
				return
			}
			if len(tr.Warnings) != 1 || !strings.HasPrefix(tr.Warnings[0], tc.want) {
				t.Errorf("warnings %q, want one starting %q", tr.Warnings, tc.want)
			}
		})
	}
	// The file reader names the file in the warning.
	p := filepath.Join(t.TempDir(), "neg.jsonl")
	os.WriteFile(p, []byte(hdr+`{"layer":0,"ids":[0,1],"weights":[-1,2]}`), 0o644)
	tr, err := ReadTraceFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Warnings) != 1 || !strings.HasPrefix(tr.Warnings[0], p+": 1 of 2 weights is negative, the first -1 at line 2") {
		t.Errorf("ReadTraceFile: warnings %q", tr.Warnings)
	}
	for _, bad := range []string{`[NaN,0]`, `[1e999,0]`, `[-1e999,0]`, `["Inf",0]`} {
		if _, err := ReadTrace(strings.NewReader(hdr + `{"layer":0,"ids":[0,1],"weights":` + bad + `}`)); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("weights %s: %v, want refused at line 2", bad, err)
		}
	}
}
