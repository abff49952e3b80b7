package envinfo

import (
	"runtime"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/nvmlinfo"
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

func TestNVMLGPUMatchesByBusID(t *testing.T) {
	r := &nvmlinfo.Report{GPUs: []nvmlinfo.GPU{
		{Index: 0, Name: "NVIDIA H200", BusID: "0000:19:00.0"},
		{Index: 1, Name: "NVIDIA H200", BusID: "0000:3B:00.0"},
	}}
	for _, tc := range []struct {
		name    string
		info    gpu.Info
		want    int
		matched bool
	}{
		{"renumbered by CUDA_VISIBLE_DEVICES", gpu.Info{Name: "NVIDIA H200", PCIBusID: "0000:3b:00.0"}, 1, true},
		{"eight-digit domain", gpu.Info{Name: "NVIDIA H200", PCIBusID: "00000000:19:00.0"}, 0, true},
		{"no bus id among twins", gpu.Info{Name: "NVIDIA H200"}, 0, false},
		{"unknown bus", gpu.Info{Name: "NVIDIA H200", PCIBusID: "0000:99:00.0"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, ok := nvmlGPU(r, tc.info)
			if ok != tc.matched || (ok && g.Index != tc.want) {
				t.Errorf("nvmlGPU = index %d, %v; want %d, %v", g.Index, ok, tc.want, tc.matched)
			}
		})
	}
	single := &nvmlinfo.Report{GPUs: r.GPUs[:1]}
	if _, ok := nvmlGPU(single, gpu.Info{Name: "NVIDIA H200"}); !ok {
		t.Error("a machine's only GPU of the same name was not matched without bus ids")
	}
}
