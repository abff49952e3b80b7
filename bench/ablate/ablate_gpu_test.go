package ablate

import (
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu/gputest"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/router"
)

// GPU tests of the ablation's CUDA kernel: they skip without a CUDA device.
// Build for the GPU machine with go test -c -o bin/ablate.test ./bench/ablate and run
// bin/ablate.test -test.run CUDAAblation there.

// The CUDA path and moe.ForwardCPU agree under the routings the ablation
// hands them: plain top-k, capacity drops (-1 slots), and expert choice's
// wider, ragged rows.
func TestCUDAAblationKernelMatchesCPU(t *testing.T) {
	dev := gputest.OpenCUDA(t)
	shape := moe.Shape{E: 16, K: 2, H: 64, I: 32}
	l := moe.NewLayer(shape, 5)
	gk, err := moe.NewRunner(dev, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer gk.Close()
	ck, _ := moe.NewRunner(nil, l, nil)
	const T = 48
	gate := router.RandomGate(shape.E, shape.H, 1, 0)
	hid, _, err := router.Workload{Tokens: T, Alpha: 1.2, Strength: 3, Seed: 2}.Hidden([][]float32{gate}, shape.E, shape.H)
	if err != nil {
		t.Fatal(err)
	}
	in := router.Input{Logits: router.Logits(hid[0], T, shape.H, gate, shape.E), T: T, E: shape.E, K: shape.K}
	for _, r := range []router.Router{router.SoftmaxTopK{Renormalize: true}, router.Switch{CapacityFactor: 0.5}, router.ExpertChoice{}} {
		t.Run(r.Name(), func(t *testing.T) {
			outs, _, err := router.Drive(r, []router.Input{in}, nil)
			if err != nil {
				t.Fatal(err)
			}
			rt := outs[0].Tokens(0, T)
			want := make([]float32, T*shape.H)
			if _, err := ck.Forward(hid[0], rt, want); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, T*shape.H)
			d, err := gk.Forward(hid[0], rt, got)
			if err != nil {
				t.Fatal(err)
			}
			w64 := make([]float64, len(want))
			for i, v := range want {
				w64[i] = float64(v)
			}
			if e := moe.RelL2(got, w64); !(e < 1e-2) {
				t.Errorf("CUDA vs CPU relative L2 %.3g, want < 1e-2 (K=%d)", e, rt.K)
			}
			if d <= 0 {
				t.Errorf("device time %v", d)
			}
			t.Logf("K=%d: %v per call", rt.K, d)
		})
	}
}

func TestCUDAAblationRun(t *testing.T) {
	dev := gputest.OpenCUDA(t)
	m := router.Model{Name: "small", E: 32, K: 4, H: 128, I: 64, Router: "softmax-topk-norm"}
	k, note, release := KernelFor(dev, moe.Shape{E: m.E, K: m.K, H: m.H, I: m.I}, 1)
	defer release()
	if !k.OnGPU() {
		t.Fatalf("KernelFor on CUDA gave %s (%s)", k.Name(), note)
	}
	a, err := RunAblation(t.Context(), AblationOptions{Model: m, Layers: 2, Tokens: 1024, Batch: 256, Workload: skewed(3), Seed: 1,
		KernelTokens: 256, KernelLayers: 1, KernelSamples: 3, Kernel: k})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range a.Runs {
		ls := run.Layers[1]
		if len(ls.KernelMS) != 3 || !(ls.RelL2 >= 0) {
			t.Errorf("%s: %d kernel samples, relL2 %v", run.Router, len(ls.KernelMS), ls.RelL2)
		}
	}
}
