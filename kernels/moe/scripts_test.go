package moe

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
