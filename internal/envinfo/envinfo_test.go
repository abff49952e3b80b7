package envinfo

import (
	"runtime"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu"
)

func TestCollectCPU(t *testing.T) {
	env := Collect(gpu.NewCPU())
	for _, k := range []string{"host", "os", "cpu", "cores", "go", "mstar", "mstar.commit", "device", "backend"} {
		if env[k] == "" {
			t.Errorf("env[%q] is empty; env = %v", k, env)
		}
	}
	if env["go"] != runtime.Version() {
		t.Errorf("env[go] = %q, want %q", env["go"], runtime.Version())
	}
	if env["backend"] != "cpu" {
		t.Errorf("env[backend] = %q, want cpu", env["backend"])
	}
	if _, ok := env["gpu"]; ok {
		t.Errorf("CPU backend recorded a GPU: %q", env["gpu"])
	}
	for k, v := range env {
		if v == "" {
			t.Errorf("env[%q] recorded as empty; unknown facts must be left out", k)
		}
	}
}

func TestCollectHostOnly(t *testing.T) {
	env := Collect(nil)
	if _, ok := env["device"]; ok {
		t.Errorf("Collect(nil) recorded a device: %v", env)
	}
	if env["cores"] == "" {
		t.Errorf("Collect(nil) has no cores: %v", env)
	}
}
