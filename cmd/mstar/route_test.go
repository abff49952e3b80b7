package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/reports/results"
)

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type routeJSON struct {
	IDs     [][]int32   `json:"ids"`
	Weights [][]float64 `json:"weights"`
	Dropped [][]bool    `json:"dropped"`
}

func TestRouteCommand(t *testing.T) {
	dir := t.TempDir()
	logits := writeFile(t, dir, "logits.json", "[[1,2,3,0],\n [0,0,5,5]]")
	// DeepSeek-V3 case of kernels/router's tests: s = sigmoid(l), bias moves
	// expert 6 in; weights s6,s4,s5 renormalised × 2.5.
	v3 := writeFile(t, dir, "v3.json", "[[2,-1,0.5,0.4,1.5,1.4,-2,3]]")
	bias := writeFile(t, dir, "bias.json", "[0,0,0,0,0,0,0.9,-0.5]")
	l3 := math.Log(3)
	sw := writeFile(t, dir, "switch.json", "[["+ftoa(l3)+",0],["+ftoa(l3)+",0],["+ftoa(l3)+",0],["+ftoa(l3)+",0]]")
	tests := []struct {
		name string
		args []string
		want routeJSON
	}{
		{"softmax-topk renormalised: e^3/(e^3+e^2)",
			[]string{"--router", "softmax-topk", "--logits", logits, "--topk", "2", "--renormalize"},
			routeJSON{IDs: [][]int32{{2, 1}, {2, 3}}, Weights: [][]float64{{0.7310585786300049, 0.2689414213699951}, {0.5, 0.5}}}},
		{"softmax-topk plain",
			[]string{"--router", "softmax-topk", "--logits", logits, "--topk", "1"},
			routeJSON{IDs: [][]int32{{2}, {2}}, Weights: [][]float64{{0.6439142598879724}, {0.4966535745378576}}}},
		{"mixtral",
			[]string{"--router", "mixtral", "--logits", logits},
			routeJSON{IDs: [][]int32{{2, 1}, {2, 3}}, Weights: [][]float64{{0.7310585786300049, 0.2689414213699951}, {0.5, 0.5}}}},
		{"deepseek-v3 with bias and groups",
			[]string{"--router", "deepseek-v3", "--logits", v3, "--bias", bias, "--topk", "3", "--n-group", "4", "--topk-group", "2", "--scaling", "2.5"},
			routeJSON{IDs: [][]int32{{6, 4, 5}}, Weights: [][]float64{{0.17137086795536288, 1.175377626879477, 1.15325150516516}}}},
		{"deepseek-v2: group {2,3} kept, × 16",
			[]string{"--router", "deepseek-v2", "--logits", logits, "--topk", "2", "--n-group", "2", "--topk-group", "1", "--scaling", "16"},
			routeJSON{IDs: [][]int32{{2, 3}, {2, 3}}, Weights: [][]float64{{16 * 0.6439142598879724, 16 * 0.03205860328008499}, {16 * 0.4966535745378576, 16 * 0.4966535745378576}}}},
		{"switch drops past capacity",
			[]string{"--router", "switch", "--logits", sw, "--topk", "1", "--capacity-factor", "1"},
			routeJSON{IDs: [][]int32{{0}, {0}, {0}, {0}}, Weights: [][]float64{{0.75}, {0.75}, {0}, {0}}, Dropped: [][]bool{{false}, {false}, {true}, {true}}}},
		{"stdin",
			[]string{"--router", "softmax-topk-norm", "--logits", "-", "--topk", "2"},
			routeJSON{IDs: [][]int32{{0, 1}}, Weights: [][]float64{{0.5, 0.5}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb strings.Builder
			code := run(append([]string{"route"}, tc.args...), strings.NewReader("[[1,1,0]]"), &out, &errb)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			var got routeJSON
			if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out.String())
			}
			if !reflect.DeepEqual(got.IDs, tc.want.IDs) || !reflect.DeepEqual(got.Dropped, tc.want.Dropped) {
				t.Errorf("ids/dropped (-want +got):\n-%v %v\n+%v %v", tc.want.IDs, tc.want.Dropped, got.IDs, got.Dropped)
			}
			if len(got.Weights) != len(tc.want.Weights) {
				t.Fatalf("%d weight rows, want %d", len(got.Weights), len(tc.want.Weights))
			}
			for i, row := range tc.want.Weights {
				for j, w := range row {
					if math.Abs(got.Weights[i][j]-w) > 1e-5*math.Max(1, w) {
						t.Errorf("weight [%d][%d] = %v, want %v", i, j, got.Weights[i][j], w)
					}
				}
			}
			if n := strings.Count(out.String(), "\n"); n < 2*len(tc.want.IDs) {
				t.Errorf("want one token per line:\n%s", out.String())
			}
		})
	}
}

func TestRouteHashTokenIDs(t *testing.T) {
	dir := t.TempDir()
	logits := writeFile(t, dir, "logits.json", "[[0,0,0,0,0,0],[0,0,0,0,0,0],[0,0,0,0,0,0]]")
	ids := writeFile(t, dir, "ids.json", "[151935,7,151935]")
	stdout, stderr, code := runMstar(t, "route", "--router", "hash", "--logits", logits, "--token-ids", ids, "--topk", "3")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got routeJSON
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.IDs[0], got.IDs[2]) || reflect.DeepEqual(got.IDs[0], got.IDs[1]) {
		t.Errorf("token id 151935 twice should route alike, 7 differently: %v", got.IDs)
	}
	frac := writeFile(t, dir, "frac.json", "[1.5,2,3]")
	if _, stderr, code := runMstar(t, "route", "--router", "hash", "--logits", logits, "--token-ids", frac); code != exitBadInput || !strings.Contains(stderr, "integer token ids") {
		t.Errorf("fractional token id: exit %d: %s", code, stderr)
	}
}

func ftoa(f float64) string { b, _ := json.Marshal(f); return string(b) }

func TestRouteBadInput(t *testing.T) {
	dir := t.TempDir()
	logits := writeFile(t, dir, "logits.json", "[[1,2,3,0],[0,0,5,5]]")
	ragged := writeFile(t, dir, "ragged.json", "[[1,2,3,0],[0,0,5]]")
	one := writeFile(t, dir, "one.json", "[[1,2,3,0],[7]]")
	notJSON := writeFile(t, dir, "bad.json", "[[1,2,")
	bias := writeFile(t, dir, "bias.json", "[0,0,0]")
	bias4 := writeFile(t, dir, "bias4.json", "[0,0,0,9]")
	nullLogit := writeFile(t, dir, "null.json", "[[1,2,3,0],\n [0,null,5,5]]")
	nullBias := writeFile(t, dir, "nullbias.json", "[null,null,null,null]")
	badBias := writeFile(t, dir, "badbias.json", "[0,0,]")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"k above experts", []string{"--router", "softmax-topk", "--logits", logits, "--topk", "5"}, "top-k 5 exceeds the 4 experts"},
		{"groups not dividing experts", []string{"--router", "deepseek-v3", "--logits", logits, "--n-group", "3", "--topk-group", "1"}, "n_group 3 does not divide the 4 experts"},
		{"deepseek-v3 defaults need 8 groups", []string{"--router", "deepseek-v3", "--logits", logits}, "n_group 8 does not divide the 4 experts"},
		{"ragged rows", []string{"--router", "mixtral", "--logits", ragged}, "row 1 has 3 numbers, row 0 has 4"},
		{"not JSON", []string{"--router", "mixtral", "--logits", notJSON}, "want a JSON array of rows of numbers (one row per token): line 1, column 7: unexpected end of input"},
		{"a null logit", []string{"--router", "mixtral", "--logits", nullLogit}, "line 2, column 5: null where a logit belongs"},
		{"a null bias", []string{"--router", "deepseek-v3", "--logits", logits, "--bias", nullBias, "--n-group", "1", "--topk-group", "1"}, "line 1, column 2: null where a number belongs"},
		{"a bias not JSON", []string{"--router", "deepseek-v3", "--logits", logits, "--bias", badBias, "--n-group", "1", "--topk-group", "1"}, "line 1, column 6: invalid character ']'"},
		{"bias length", []string{"--router", "deepseek-v3", "--logits", logits, "--bias", bias, "--n-group", "1", "--topk-group", "1"}, "3 bias values, want one per expert (4"},
		{"unknown router", []string{"--router", "nope", "--logits", logits}, `unknown router "nope"`},
		{"no router", []string{"--logits", logits}, "--router is required"},
		{"missing file", []string{"--router", "mixtral", "--logits", filepath.Join(dir, "none.json")}, "--logits: open "},
		{"negative scaling", []string{"--router", "mixtral", "--logits", logits, "--scaling", "-1"}, "--scaling -1: must be at least 0 (0: the router's default)"},
		{"infinite scaling", []string{"--router", "mixtral", "--logits", logits, "--scaling", "Inf"}, "--scaling +Inf: must be at least 0"},
		{"mix above 1", []string{"--router", "cross-layer", "--logits", logits, "--mix", "2"}, "--mix 2: must be in [0, 1]"},
		{"zero topk", []string{"--router", "softmax-topk", "--logits", logits, "--topk", "0"}, "--topk 0: must be at least 1"},
		{"missing bias file", []string{"--router", "deepseek-v3", "--logits", logits, "--bias", filepath.Join(dir, "none.json")}, "--bias: open "},
		{"one number in a row", []string{"--router", "mixtral", "--logits", one}, "row 1 has 1 number, row 0 has 4"},
		{"a bias the router ignores", []string{"--router", "softmax-topk", "--logits", logits, "--bias", bias4}, "router softmax-topk does not use --bias"},
		{"a bias mixtral ignores", []string{"--router", "mixtral", "--logits", logits, "--bias", bias4}, "router mixtral does not use --bias"},
		{"a setting the router ignores", []string{"--router", "hash", "--logits", logits, "--n-group", "2"}, "router hash does not use --n-group (it takes only --seed)"},
		{"settings of a router that takes none", []string{"--router", "mixtral", "--logits", logits, "--renormalize", "--scaling", "2"}, "router mixtral does not use --scaling, --renormalize (it takes no router settings)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runMstar(t, append([]string{"route"}, tc.args...)...)
			if code != exitBadInput {
				t.Errorf("exit %d, want %d (bad input); stderr: %s", code, exitBadInput, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q lacks %q", stderr, tc.want)
			}
			if out != "" {
				t.Errorf("printed a routing despite the error: %s", out)
			}
			if strings.Contains(stderr, "layer 0") {
				t.Errorf("route has no layers, but stderr names one: %s", stderr)
			}
		})
	}
}

// One routing type, one routing file: what 'route' prints is a routing file
// that bench moe and ablate router replay as it is — the same experts,
// weights and dropped slots the router returned — and what they write back
// (--routing-out) reads as the same routing again.
func TestRoutingFileRoundTrip(t *testing.T) {
	const T, E, K = 24, 16, 2
	var rows []string
	logits := make([]float32, T*E)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(7*i+3))) * 2 // no ties
	}
	for tok := 0; tok < T; tok++ {
		var cells []string
		for e := 0; e < E; e++ {
			cells = append(cells, ftoa(float64(logits[tok*E+e])))
		}
		rows = append(rows, "["+strings.Join(cells, ",")+"]")
	}
	dir := t.TempDir()
	lp := writeFile(t, dir, "logits.json", "["+strings.Join(rows, ",\n")+"]")
	for _, tc := range []struct {
		name  string
		flags []string
		cfg   router.Config
		drops bool
	}{
		{"softmax-topk", nil, router.Config{}, false},
		{"switch", []string{"--capacity-factor", "1"}, router.Config{CapacityFactor: 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := router.New(tc.name, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			outs, _, err := router.Drive(r, []router.Input{{Logits: logits, T: T, E: E, K: K}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := outs[0]
			if (want.DroppedSlots() > 0) != tc.drops {
				t.Fatalf("%s dropped %d slots; the case wants drops: %v", tc.name, want.DroppedSlots(), tc.drops)
			}
			stdout, stderr, code := runMstar(t, append([]string{"route", "--router", tc.name, "--logits", lp, "--topk", "2"}, tc.flags...)...)
			if code != exitOK {
				t.Fatalf("route: exit %d: %s", code, stderr)
			}
			routed := writeFile(t, dir, tc.name+".json", stdout)
			same := func(what, path string) {
				t.Helper()
				tr, err := router.ReadTraceFile(path)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				got := tr.Routings[0]
				if tr.Experts != E || len(tr.Routings) != 1 || got.M != T || got.K != K || !reflect.DeepEqual(got.IDs, want.IDs) ||
					!reflect.DeepEqual(got.Weights, want.Weights) || !reflect.DeepEqual(got.Dropped, want.Dropped) {
					t.Errorf("%s: routing differs from the router's (-want +got):\n-%+v\n+%+v", what, want, got)
				}
			}
			same("route's output", routed)

			// bench moe computes the live slots only: the gate names them.
			benchOut, benchDoc := filepath.Join(dir, tc.name+"-bench.jsonl"), filepath.Join(dir, tc.name+"-bench.json")
			args := []string{"bench", "moe", "--device", "cpu", "--experts", "16", "--topk", "2", "--hidden", "32", "--inter", "16",
				"--batch", "24", "--samples", "2", "--routing-file", routed, "--out", benchDoc}
			if tc.drops { // a routing with dropped slots is not recorded: said before the run
				_, stderr, code := runMstar(t, append(args, "--routing-out", benchOut)...)
				if code != exitBadInput || !strings.Contains(stderr, "dropped slots") {
					t.Errorf("bench moe --routing-out of a routing with drops: exit %d: %s", code, stderr)
				}
			} else {
				args = append(args, "--routing-out", benchOut)
			}
			if _, stderr, code = runMstar(t, args...); code != exitOK {
				t.Fatalf("bench moe --routing-file: exit %d: %s", code, stderr)
			}
			doc, err := results.ReadFile(benchDoc)
			if err != nil {
				t.Fatal(err)
			}
			facts := fmt.Sprintf("; %d slots on %d experts;", want.Slots(), want.Touched(E))
			if len(doc.Results) == 0 || len(doc.Results[0].Gates) == 0 || !strings.Contains(doc.Results[0].Gates[0].Reason, facts) {
				t.Errorf("bench moe did not compute the file's %q: %+v", facts, doc.Results[0].Gates)
			}

			// ablate router replays it: the same drops, and as its baseline
			// it writes the same routing back.
			ablateOut, ablateDoc := filepath.Join(dir, tc.name+"-ablate.jsonl"), filepath.Join(dir, tc.name+"-ablate.json")
			args = append([]string{"ablate", "router", "--routing-file", routed, "--routers", "trace", "--baseline", "trace",
				"--kernel-tokens", "8", "--kernel-samples", "1", "--out", ablateDoc}, tinyModel...)
			if !tc.drops {
				args = append(args, "--routing-out", ablateOut)
			}
			stdout, stderr, code = runMstar(t, args...)
			if code != exitOK {
				t.Fatalf("ablate router --routing-file: exit %d: %s", code, stderr)
			}
			if !strings.Contains(stdout, "1 layer × 24 tokens") {
				t.Errorf("ablate did not replay the file's 24 tokens:\n%s", stdout)
			}
			// More tokens than the file holds is a mistake, not a quiet cut.
			over := append([]string{"ablate", "router", "--routing-file", routed, "--routers", "trace", "--tokens", "25", "--kernel-tokens", "0"}, tinyModel...)
			if _, stderr, code := runMstar(t, over...); code != exitBadInput || !strings.Contains(stderr, "--tokens 25 exceeds the 24 tokens") {
				t.Errorf("ablate router --tokens 25 over a 24-token file: exit %d: %s", code, stderr)
			}
			doc, err = results.ReadFile(ablateDoc)
			if err != nil {
				t.Fatal(err)
			}
			wantDrop := 100 * float64(want.DroppedSlots()) / float64(want.DroppedSlots()+want.Slots())
			found := false
			for _, r := range doc.Results {
				if m := r.Metric("assignment_drop"); m != nil && r.Name == "router" && m.Measured() {
					found = true
					if math.Abs(m.Samples[0]-wantDrop) > 1e-9 {
						t.Errorf("ablate's drop%% %v, want the file's %v", m.Samples[0], wantDrop)
					}
				}
			}
			if !found {
				t.Errorf("ablate's document has no drop%% of the trace router")
			}
			if tc.drops {
				return
			}
			same("bench moe --routing-out", benchOut)
			same("ablate router --routing-out", ablateOut)
		})
	}
}
