package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	moebench "github.com/mstar-dev/mstar/bench/moe"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/reports/results"
	"github.com/mstar-dev/mstar/scripts/peers"
)

// peerFlags are bench moe's --peers, --python and --triton-peer.
type peerFlags struct {
	on                        bool
	python, tritonPeer, impls string
	tmp                       string // scratch folder for the dumps and the routing
}

func (p *peerFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&p.on, "peers", false, "CUDA: also run the peers (torch, Triton, cublas-bmm; the embedded scripts/peers/moe_peers.py) over the same layer, weights and routing, and print mstar against each")
	f.StringVar(&p.python, "python", "", "--peers: the python that has torch (default: $"+peers.EnvPython+", else python3)")
	f.StringVar(&p.impls, "peer-impls", "", "--peers: which peers, comma-separated: loop (torch-loop), grouped (torch-grouped_mm), triton (sglang/vLLM), bmm (cublas-bmm); triton-ref comes with --triton-peer (default: all)")
	f.StringVar(&p.tritonPeer, "triton-peer", "", "--peers: a `PATH` (a .py file, or a folder with triton_moe_ref.py or a package) whose fused_experts runs as peer triton-ref")
}

// prepare checks the flags and, with --peers, makes sure the run dumps its
// outputs for the cross-check; it returns the dump folder to use.
func (p *peerFlags) prepare(dumpDir string) (string, error) {
	if !p.on {
		if p.python != "" || p.tritonPeer != "" || p.impls != "" {
			return "", usageErr("--python, --triton-peer and --peer-impls go with --peers")
		}
		return dumpDir, nil
	}
	for _, n := range strings.Split(p.impls, ",") {
		switch strings.TrimSpace(n) {
		case "", "loop", "grouped", "triton", "bmm", "triton-ref":
		default:
			return "", usageErr("--peer-impls: unknown peer %q (want loop, grouped, triton, bmm)", n)
		}
	}
	if p.tritonPeer != "" {
		if _, err := os.Stat(p.tritonPeer); err != nil {
			return "", badInput(fmt.Errorf("--triton-peer: %w", err))
		}
	}
	d, err := os.MkdirTemp("", "mstar-bench-peers-*")
	if err != nil {
		return "", err
	}
	p.tmp = d
	if dumpDir == "" {
		dumpDir = filepath.Join(d, "dump")
		if err := os.MkdirAll(dumpDir, 0o755); err != nil {
			return "", err
		}
	}
	return dumpDir, nil
}

func (p *peerFlags) cleanup() {
	if p.tmp != "" {
		os.RemoveAll(p.tmp)
	}
}

// run runs the peers after mstar's sweep and adds their results to doc (the
// run table prints their comparison after mstar's rows); a peer run that
// cannot happen at all (no torch, no GPU) is said once, as a warning, and
// mstar's rows stand.
func (p *peerFlags) run(ctx context.Context, a *app, dev gpu.Info, opt moebench.MoEOptions, rep *moebench.MoEReport, doc *results.Document, dumpDir string) error {
	if !p.on || rep.Batches == 0 {
		return nil
	}
	unavailable := func(why string) {
		msg := "peers not run: " + why + "; mstar's rows stand alone"
		doc.Warnings = append(doc.Warnings, msg) // the table prints it
	}
	if _, err := peers.CheckTorch(ctx, peers.Python(p.python)); err != nil {
		var ue *peers.UnavailableError
		if errors.As(err, &ue) {
			unavailable(ue.Reason)
			return nil
		}
		return err
	}
	if dev.Backend != gpu.CUDA {
		unavailable("they run on CUDA, and mstar ran on the CPU")
		return nil
	}
	ordinal := 0
	if s, err := gpu.ParseSpec(dev.ID); err == nil {
		ordinal = s.Index
	}
	routing := filepath.Join(p.tmp, "routing.json")
	if err := writeRoutingFile(routing, rep.Routing, opt.Shape.E); err != nil {
		return err
	}
	pdoc, err := peers.Run(ctx, peers.Options{Python: p.python, TritonPeer: p.tritonPeer, Impls: p.impls, Samples: opt.Samples, MinCopies: opt.WeightCopies, Device: ordinal, Log: a.stderr}, doc, routing, dumpDir)
	if err != nil && ctx.Err() == nil {
		unavailable(err.Error())
		return nil
	}
	if pdoc == nil { // interrupted before the peers finished a batch
		return err
	}
	doc.Results = append(doc.Results, pdoc.Results...)
	doc.Warnings = append(doc.Warnings, pdoc.Warnings...)
	for _, r := range pdoc.Results {
		if !r.Passed() {
			say(a.stderr, "warning: peer %s at M=%s failed its correctness gate: %s", r.Params["impl"], r.Params["batch"], r.Gates[0].Reason)
		}
	}
	return err // interrupted: the batches the peers finished are kept
}
