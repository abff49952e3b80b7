package moe

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/kernels/router"
)

// docMetric, docGate and docResult are the parts of a results document
// that the scripts/moe-*.py tests write.
type docMetric struct {
	Name    string    `json:"name"`
	Samples []float64 `json:"samples"`
}

type docGate struct {
	Pass bool `json:"pass"`
}

type docResult struct {
	Name    string            `json:"name"`
	Params  map[string]string `json:"params"`
	Metrics []docMetric       `json:"metrics"`
	Gates   []docGate         `json:"gates,omitempty"`
}

// writeDoc writes a results document of rs as name in a test folder.
func writeDoc(t *testing.T, name string, rs []docResult) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	b, err := json.Marshal(map[string]any{"results": rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runScript runs scripts/SCRIPT with python3 (the test skips without it).
func runScript(t *testing.T, script string, args ...string) ([]byte, error) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("no python3 to run scripts/%s", script)
	}
	return exec.Command(py, append([]string{filepath.Join("..", "..", "scripts", script)}, args...)...).CombinedOutput()
}

// scripts/ncu-peer.py keeps its own table of the four shapes (it runs on the
// GPU machine, with no Go): its sizes must be the presets', deepseek at tp 8,
// and its bmm slots the cublas-bmm peer's (min(E, M·k) experts × the rest).
func TestNcuPeerShapesArePresets(t *testing.T) {
	for _, c := range []struct {
		shape, model string
		tp, m        int
	}{{"qwen3-30b", "qwen3-30b-a3b", 1, 4096}, {"qwen3-235b", "qwen3-235b-a22b", 1, 8}, {"deepseek", "deepseek-v3", 8, 1}, {"mixtral", "mixtral-8x7b", 1, 3}} {
		p, err := router.ModelByName(c.model)
		if err != nil {
			t.Fatal(err)
		}
		out, err := runScript(t, "ncu-peer.py", "--dry-run", "triton", c.shape, strconv.Itoa(c.m))
		want := fmt.Sprintf("E=%d H=%d I=%d top-%d", p.E, p.H, p.I/c.tp, p.K)
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("ncu-peer.py triton %s: %v\n%s\nwant %q", c.shape, err, out, want)
		}
		experts := min(p.E, c.m*p.K)
		out, err = runScript(t, "ncu-peer.py", "--dry-run", "bmm", c.shape, strconv.Itoa(c.m))
		want = fmt.Sprintf("%d experts x %d tokens, gemm1 [%[2]dx%d]", experts, (c.m*p.K+experts-1)/experts, p.H)
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("ncu-peer.py bmm %s %d: %v\n%s\nwant %q", c.shape, c.m, err, out, want)
		}
	}
	if out, err := runScript(t, "ncu-peer.py", "--dry-run", "bmm", "deepseek", "0"); err == nil || !strings.Contains(string(out), "at least 1") {
		t.Errorf("M=0 accepted: %v\n%s", err, out)
	}
}
