package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/reports/results"
)

// tinyModel overrides the preset's shape so the whole command runs in a blink.
var tinyModel = []string{"--experts", "16", "--topk", "2", "--hidden", "32", "--inter", "16", "--device", "cpu"}

func TestAblateRouterCommand(t *testing.T) {
	dir := t.TempDir()
	out, heat := filepath.Join(dir, "ablate.json"), filepath.Join(dir, "load.png")
	args := append([]string{"ablate", "router", "--tokens", "512", "--layers", "3", "--batch", "128",
		"--kernel-tokens", "8", "--kernel-samples", "2", "--out", out, "--heatmap", heat}, tinyModel...)
	stdout, stderr, code := runMstar(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"MaxVio", "balance", "entropy", "drop%", "aux", "z-loss", "route µs", "kernel ms", "×uniform", "relL2",
		"softmax-topk-norm", "deepseek-v3-lossfree", "expert-choice", "cross-layer", "(uniform)", "the last 8 of 512 tokens"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	doc, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Suite != "ablate router" || doc.Env["cores"] == "" {
		t.Errorf("suite %q, env %v", doc.Suite, doc.Env)
	}
	layers := map[string]int{}
	for _, r := range doc.Results {
		if r.Name == "router/layer" {
			layers[r.Params["router"]]++
		}
	}
	if layers["hash"] != 3 || layers["switch"] != 3 {
		t.Errorf("per-layer results per router: %v, want 3 each", layers)
	}
	// Record the baseline's routing and replay it.
	rec := filepath.Join(dir, "routing.jsonl")
	if _, stderr, code := runMstar(t, append([]string{"ablate", "router", "--tokens", "128", "--layers", "2", "--kernel-tokens", "0", "--record-trace", rec}, tinyModel...)...); code != exitOK {
		t.Fatalf("--record-trace: exit %d: %s", code, stderr)
	}
	stdout2, stderr, code := runMstar(t, append([]string{"ablate", "router", "--trace", rec, "--routers", "trace,softmax-topk-norm", "--kernel-tokens", "0"}, tinyModel...)...)
	if code != exitOK || !strings.Contains(stdout2, "2 layers × 128 tokens") {
		t.Fatalf("replaying the recorded trace: exit %d: %s\n%s", code, stderr, stdout2)
	}
	if _, stderr, code := runMstar(t, append([]string{"ablate", "router", "--tokens", "64", "--layers", "1", "--kernel-tokens", "0", "--baseline", "switch", "--record-trace", rec}, tinyModel...)...); code != exitBadInput || !strings.Contains(stderr, "cannot be recorded") {
		t.Errorf("recording switch: exit %d: %s", code, stderr)
	}
	f, err := os.Open(heat)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.DecodeConfig(f); err != nil {
		t.Errorf("heat map: %v", err)
	}
}

func TestAblateRouterInputs(t *testing.T) {
	td := filepath.Join("testdata", "router")
	t.Run("gates from a safetensors file, bias and all", func(t *testing.T) {
		stdout, stderr, code := runMstar(t, append([]string{"ablate", "router", "--gates", filepath.Join(td, "gates-e16-h32.safetensors"),
			"--layers", "2", "--tokens", "256", "--routers", "deepseek-v3", "--n-group", "4", "--topk-group", "2", "--kernel-tokens", "0"}, tinyModel...)...)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(stdout, "gates:") || !strings.Contains(stdout, "deepseek-v3") {
			t.Errorf("table does not say where the gates came from:\n%s", stdout)
		}
	})
	t.Run("trace replay", func(t *testing.T) {
		stdout, stderr, code := runMstar(t, append([]string{"ablate", "router", "--trace", filepath.Join(td, "trace-e16-k2.jsonl"),
			"--kernel-tokens", "4", "--kernel-samples", "1"}, tinyModel...)...)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(stdout, "2 layers × 64 tokens") || !strings.Contains(stdout, "trace") {
			t.Errorf("trace run table:\n%s", stdout)
		}
		if strings.Contains(stderr, "warning") {
			t.Errorf("a clean trace is warned of:\n%s", stderr)
		}
	})
	// A negative weight replays, with a warning saying how many and where.
	t.Run("trace with negative weights", func(t *testing.T) {
		neg := writeFile(t, t.TempDir(), "neg.jsonl", `{"format":"mstar.routing-trace","experts":16,"topk":2}
{"layer":0,"ids":[3,4],"weights":[0.5,0.5]}
{"layer":0,"ids":[0,8],"weights":[1.5,-0.5]}
`)
		_, stderr, code := runMstar(t, append([]string{"ablate", "router", "--routing-file", neg, "--kernel-tokens", "0"}, tinyModel...)...)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if want := "warning: --routing-file: " + neg + ": 1 of 4 weights is negative, the first -0.5 at line 3 (layer 0, token 1), slot 1"; !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	})
}

func TestAblateRouterBadInput(t *testing.T) {
	td := filepath.Join("testdata", "router")
	dir := t.TempDir()
	// A gate file lacking layer 1, and one whose gate is transposed.
	write := func(name string, ts []router.Tensor) string {
		var b bytes.Buffer
		if err := router.WriteSafetensors(&b, ts); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, b.Bytes(), 0o644)
		return p
	}
	missing := write("missing.safetensors", []router.Tensor{{Name: router.GateTensorName(0), DType: "F32", Shape: []int{16, 32}, Data: make([]float32, 16*32)}})
	wrong := write("wrong.safetensors", []router.Tensor{{Name: router.GateTensorName(0), DType: "F32", Shape: []int{32, 16}, Data: make([]float32, 16*32)}})
	garbage := filepath.Join(dir, "garbage.safetensors")
	os.WriteFile(garbage, []byte("this is not a safetensors file"), 0o644)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"k above experts", []string{"--topk", "17"}, "--topk 17 exceeds the 16 experts"},
		{"groups not dividing experts", []string{"--routers", "deepseek-v3", "--n-group", "3", "--topk-group", "1"}, "n_group 3 does not divide the 16 experts"},
		{"missing gate tensor", []string{"--gates", missing, "--gate-layers", "0,1"}, "no tensor named model.layers.1.mlp.gate.weight"},
		{"too few gate layers", []string{"--gates", missing, "--layers", "2"}, "1 gate tensors"},
		{"gate of the wrong shape", []string{"--gates", wrong, "--layers", "1"}, "tensor model.layers.0.mlp.gate.weight has shape [32 16], want [16 32]"},
		{"not a safetensors file", []string{"--gates", garbage}, "not a safetensors file"},
		{"trace with an out-of-range expert", []string{"--trace", filepath.Join(td, "trace-bad-id.jsonl")}, "line 3: expert id 16 out of range [0,16)"},
		{"trace over other experts", []string{"--trace", filepath.Join(td, "trace-e16-k2.jsonl"), "--experts", "32"}, "the trace routes over 16 experts"},
		{"unknown model", []string{"--model", "gpt-9"}, `unknown model "gpt-9"`},
		{"unknown router", []string{"--routers", "nope"}, `unknown router "nope"`},
		{"bad correlation", []string{"--correlation", "1.5"}, "--correlation 1.5: must be in [0, 1]"},
		{"gate layers without gates", []string{"--gate-layers", "3"}, "--gate-layers needs --gates"},
		// 0 and -1 get the same message, naming the flag and the range.
		{"no layers", []string{"--layers", "0"}, "--layers 0: must be at least 1"},
		{"negative layers", []string{"--layers", "-1"}, "--layers -1: must be at least 1"},
		{"no tokens", []string{"--tokens", "0"}, "--tokens 0: must be at least 1"},
		{"negative batch", []string{"--batch", "-1"}, "--batch -1: must be at least 0 (0: one batch)"},
		{"negative kernel tokens", []string{"--kernel-tokens", "-1"}, "--kernel-tokens -1: must be at least 0 (0: skip the kernel)"},
		{"no kernel samples", []string{"--kernel-samples", "0"}, "--kernel-samples 0: must be at least 1"},
		{"negative zipf", []string{"--zipf", "-1"}, "--zipf -1: must be at least 0"},
		{"negative strength", []string{"--strength", "-2"}, "--strength -2: must be at least 0"},
		{"override of zero experts", []string{"--experts", "0"}, "--experts 0: must be at least 1"},
		// Refused with the numbers before anything is allocated, not a Go
		// out-of-memory crash.
		{"too large for memory", []string{"--tokens", "2000000000", "--layers", "100000"}, "try fewer --tokens, --layers or experts"},
		{"heat map named .jpg", []string{"--heatmap", filepath.Join(dir, "load.jpg")}, "the heat map is a PNG image: name it .png"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"ablate", "router", "--tokens", "64", "--layers", "1", "--kernel-tokens", "0"}, tinyModel...)
			_, stderr, code := runMstar(t, append(args, tc.args...)...)
			if code != exitBadInput {
				t.Errorf("exit %d, want %d; stderr: %s", code, exitBadInput, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q lacks %q", stderr, tc.want)
			}
		})
	}
	// With --trace, 0 layers and tokens are all of the trace's.
	stdout, stderr, code := runMstar(t, append([]string{"ablate", "router", "--trace", filepath.Join(td, "trace-e16-k2.jsonl"),
		"--layers", "0", "--tokens", "0", "--kernel-tokens", "0"}, tinyModel...)...)
	if code != exitOK || !strings.Contains(stdout, "2 layers × 64 tokens") {
		t.Errorf("--trace with --layers 0 --tokens 0: exit %d, %s\n%s", code, stderr, stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "load.jpg")); err == nil {
		t.Error("PNG data written under a .jpg name")
	}
	// A router setting none of the compared routers uses is said to do nothing.
	_, stderr, _ = runMstar(t, append([]string{"ablate", "router", "--tokens", "64", "--layers", "1", "--kernel-tokens", "0", "--routers", "hash,random", "--n-group", "2"}, tinyModel...)...)
	if !strings.Contains(stderr, "warning: --n-group: none of the routers compared uses it") {
		t.Errorf("--n-group with hash,random: no warning:\n%s", stderr)
	}
	if _, stderr, code := runMstar(t, "ablate", "nope"); code != exitBadInput || !strings.Contains(stderr, `unknown command "nope"`) {
		t.Errorf("ablate nope: exit %d, %s", code, stderr)
	}
}
