package moe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu/gputest"
)

// On the CPU the runner's checked pass is ForwardCPU's output, every sample
// and stage is timed, and Forward computes the same layer.
func TestRunnerCPU(t *testing.T) {
	l := NewLayer(Shape{E: 8, K: 2, H: 32, I: 16}, 1)
	g, err := NewRunner(nil, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.OnGPU() || g.Name() != "cpu (moe.ForwardCPU, float32, all cores)" {
		t.Fatalf("runner without a device: on GPU %v, %q", g.OnGPU(), g.Name())
	}
	const m = 5
	x := RandomInput(m, l.Shape.H, 2)
	r := UniformRouting(m, l.Shape.E, l.Shape.K, 3)
	want := make([]float32, m*l.Shape.H)
	ForwardCPU(l, x, r, want)

	warmCalls := 0
	g.WarmUp = func(call func() (float64, error)) error {
		for range 4 {
			if sec, err := call(); err != nil || sec <= 0 {
				return fmt.Errorf("warm-up call: %v s: %w", sec, err)
			}
			warmCalls++
		}
		return nil
	}
	p, err := g.Run(context.Background(), x, r, 3, Config{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if warmCalls != 4 {
		t.Errorf("the warm-up hook made %d calls, want 4", warmCalls)
	}
	if want := CPUKernels(r, l.Shape.E); len(p.US) != 3 || len(p.Stages) != 4 || len(p.Stages[2].US) != 3 || p.Note != want {
		t.Errorf("pass: %d samples, %d stages, note %q; want 3 samples, 4 stages of 3, %q", len(p.US), len(p.Stages), p.Note, want)
	}
	for i := range want {
		if p.Out[i] != want[i] {
			t.Fatalf("out[%d] = %v, ForwardCPU gives %v", i, p.Out[i], want[i])
		}
	}
	got := make([]float32, len(want))
	if d, err := g.Forward(x, r, got); err != nil || d <= 0 || got[7] != want[7] {
		t.Errorf("Forward: %v, %v, out[7] %v want %v", d, err, got[7], want[7])
	}
	if _, err := g.Compile(Config{}); err == nil {
		t.Error("compiling a configuration without a CUDA device succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Run(ctx, x, r, 3, Config{}, false); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled run: %v, want context.Canceled", err)
	}
}

// TestCUDARunnerMinCopies: MinCopies makes a small batch, whose touched
// experts exceed twice the L2 (one copy by the L2 rule), rotate through that
// many weight copies, and the timing's note says so.
func TestCUDARunnerMinCopies(t *testing.T) {
	dev := gputest.OpenCUDA(t)
	s := Shape{E: 8, K: 2, H: 4096, I: 14336} // mixtral-8x7b: 352 MB an expert
	g, err := NewRunner(dev, NewLayer(s, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	x, r := RandomInput(2, s.H, 2), UniformRouting(2, s.E, s.K, 3)
	for _, want := range []int{1, 3} {
		g.MinCopies = want
		p, _, err := g.CheckedPass(x, r, Config{})
		if err != nil {
			t.Fatal(err)
		}
		_, note, err := g.Time(p, r, 2)
		p.Free()
		if err != nil {
			t.Fatal(err)
		}
		if g.Copies() != want || !strings.Contains(note, fmt.Sprintf(" %d weight cop", want)) {
			t.Errorf("MinCopies %d: %d copies, note %q", want, g.Copies(), note)
		}
	}
}
