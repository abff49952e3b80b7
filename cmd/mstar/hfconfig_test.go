package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

func TestHFConfigFlag(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "tiny-moe", "config.json")
	os.MkdirAll(filepath.Dir(small), 0o755)
	os.WriteFile(small, []byte(`{"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2, "hidden_size": 64,
		"intermediate_size": 1024, "moe_intermediate_size": 32, "norm_topk_prob": true}`), 0o644)
	out := filepath.Join(dir, "moe.json")
	stdout, stderr, code := runMstar(t, "bench", "moe", "--hf-config", small, "--batch", "3", "--device", "cpu", "--samples", "1", "--out", out)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "# mstar bench moe: tiny-moe, local shape E8 k2 H64 I32") {
		t.Errorf("bench moe did not take the file's shape (moe_intermediate_size, not intermediate_size):\n%s", stdout)
	}
	d, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if p := d.Results[0].Params; p["model"] != "tiny-moe" || p["inter"] != "32" {
		t.Errorf("params %v", p)
	}
	// The shipped DeepSeek-V3 config with --tp 8 is the preset's shard; the
	// router ablation takes its own router and settings.
	stdout, stderr, code = runMstar(t, "ablate", "router", "--hf-config", "../../testdata/hf/deepseek-v3/config.json",
		"--layers", "1", "--tokens", "64", "--kernel-tokens", "0", "--routers", "deepseek-v3")
	if code != exitOK || !strings.Contains(stdout, "# deepseek-v3: E=256 k=8 H=7168 I=2048") {
		t.Errorf("ablate router --hf-config: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
	}

	// tune moe takes it too, and names the file for the file's shape.
	stdout, stderr, code = runMstar(t, "tune", "moe", "--hf-config", filepath.Dir(small), "--batch", "2", "--device", "cpu",
		"--samples", "4", "--tune-samples", "2", "--dir", dir)
	if code != exitOK || !strings.Contains(stdout, "# mstar tune moe: tiny-moe (tp 1, ep 1)") || !containsWrapped(stdout, "E=8 N=32 K=64 topk=2 bf16") {
		t.Errorf("tune moe --hf-config: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
	}

	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"num_experts": 8, "num_local_experts": 16, "num_experts_per_tok": 2, "hidden_size": 64, "intermediate_size": 32}`), 0o644)
	dup := filepath.Join(dir, "dup.json")
	os.WriteFile(dup, []byte("{\"num_experts\": 128,\n \"num_experts\": 64, \"num_experts_per_tok\": 2, \"hidden_size\": 64, \"intermediate_size\": 32}"), 0o644)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"duplicate key", []string{"ablate", "router", "--hf-config", dup}, "dup.json: num_experts: line 2, column 2: duplicate key (first at line 1, column 2)"},
		{"contradictory", []string{"bench", "moe", "--hf-config", bad, "--device", "cpu"}, "num_experts/num_local_experts: contradictory: num_experts is 8 but num_local_experts is 16"},
		{"missing key", []string{"ablate", "router", "--hf-config", out}, "num_experts: missing"},
		{"no file", []string{"bench", "moe", "--hf-config", filepath.Join(dir, "none.json"), "--device", "cpu"}, "no such file"},
		{"with --model", []string{"bench", "moe", "--hf-config", small, "--model", "mixtral-8x7b", "--device", "cpu"}, "--hf-config and --model both give the shape"},
		{"ablate with --model", []string{"ablate", "router", "--hf-config", small, "--model", "mixtral-8x7b"}, "--hf-config and --model both give the shape"},
		{"tp applied", []string{"bench", "moe", "--hf-config", small, "--tp", "3", "--device", "cpu"}, "--tp 3 does not divide the intermediate size 32"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runMstar(t, tt.args...)
			if code != exitBadInput || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tt.want)
			}
		})
	}
}
