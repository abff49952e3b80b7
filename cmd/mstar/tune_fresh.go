package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/mstar-dev/mstar/bench/ceilings"
	moebench "github.com/mstar-dev/mstar/bench/moe"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/reports/results"
)

// freshBench is tune moe's FreshTimer: it runs this binary's 'bench moe'
// in a new process for one batch and configuration, over the same layer,
// weights and routing (the shape, sharding, routing, seed and weight
// copies as flags), and reads the batch's median latency from its document.
type freshBench struct {
	exe    string   // this binary
	shape  []string // the flags that make the same layer and routing
	device string   // the device the tune runs on ("cuda:0")
	dir    string   // a folder for the ceilings file and the runs' documents

	once     sync.Once
	ceilPath string
	ceilErr  error
}

// freshShapeArgs are the bench moe flags for opt's layer and routing.
func freshShapeArgs(opt moebench.MoEOptions) []string {
	s := opt.Shape
	args := []string{"--experts", strconv.Itoa(s.E), "--topk", strconv.Itoa(s.K), "--hidden", strconv.Itoa(s.H), "--inter", strconv.Itoa(s.I),
		"--tp", strconv.Itoa(max(opt.TP, 1)), "--ep", strconv.Itoa(max(opt.EP, 1)), "--seed", strconv.FormatUint(opt.Seed, 10)}
	if opt.Trace != nil {
		args = append(args, "--routing-file", opt.TraceName)
	} else if opt.Routing != "" {
		args = append(args, "--routing", opt.Routing)
	}
	if opt.WeightCopies > 0 {
		args = append(args, "--weight-copies", strconv.Itoa(opt.WeightCopies))
	}
	if opt.Samples > 0 {
		args = append(args, "--samples", strconv.Itoa(opt.Samples))
	}
	return args
}

// ceilingsFile writes ceil once as a results document the children read
// with --ceilings, so that none measures them again.
func (f *freshBench) ceilingsFile(ceil *ceilings.Ceilings) (string, error) {
	f.once.Do(func() {
		f.ceilPath = filepath.Join(f.dir, "ceilings.json")
		f.ceilErr = results.WriteFile(f.ceilPath, ceil.Document())
	})
	return f.ceilPath, f.ceilErr
}

func (f *freshBench) TimeFresh(ctx context.Context, m int, c moe.Config, ceil *ceilings.Ceilings) (float64, error) {
	if ceil == nil {
		return 0, fmt.Errorf("no ceilings for the fresh run")
	}
	cf, err := f.ceilingsFile(ceil)
	if err != nil {
		return 0, fmt.Errorf("writing the ceilings for the fresh run: %w", err)
	}
	out, err := os.CreateTemp(f.dir, fmt.Sprintf("fresh-M%d-*.json", m))
	if err != nil {
		return 0, err
	}
	out.Close()
	defer os.Remove(out.Name())
	args := append([]string{"bench", "moe"}, f.shape...)
	args = append(args, "--batch", strconv.Itoa(m), "--config", c.String(), "--rounds", "1", "--device", f.device,
		"--ceilings", cf, "--out", out.Name())
	cmd := exec.CommandContext(ctx, f.exe, args...)
	cmd.Env = append(os.Environ(), workerEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("bench moe: %v: %s", err, lastLine(stderr.String()))
	}
	d, err := results.ReadFile(out.Name())
	if err != nil {
		return 0, fmt.Errorf("bench moe's document: %w", err)
	}
	for _, r := range d.Results {
		if r.Name != moebench.MoEResult || r.Params["batch"] != strconv.Itoa(m) || r.Params["impl"] != "mstar" {
			continue
		}
		if lat := r.Metric(moebench.MoELatency); lat != nil && len(lat.Samples) > 0 {
			return results.Median(lat.Samples), nil
		}
		return 0, fmt.Errorf("bench moe measured no latency at M=%d: %s", m, strings.Join(r.Warnings, "; "))
	}
	return 0, fmt.Errorf("bench moe's document has no M=%d row", m)
}

// lastLine is the last non-empty line of s, what mstar wrote to stderr,
// with say's wrapping undone and without mstar's prefix.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(unsay(s)), "\n")
	return strings.TrimPrefix(strings.TrimSpace(lines[len(lines)-1]), "mstar: ")
}

// newFreshBench is the FreshTimer of a tune of opt on device, and what
// removes its folder.
func newFreshBench(opt moebench.MoEOptions, device string) (*freshBench, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("--finalists: finding this binary for the fresh runs: %w", err)
	}
	dir, err := os.MkdirTemp("", "mstar-fresh-")
	if err != nil {
		return nil, nil, fmt.Errorf("--finalists: a folder for the fresh runs: %w", err)
	}
	return &freshBench{exe: exe, shape: freshShapeArgs(opt), device: device, dir: dir}, func() { os.RemoveAll(dir) }, nil
}
