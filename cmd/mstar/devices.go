package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/internal/gpu/nvmlinfo"
	"github.com/mstar-dev/mstar/internal/shard"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports"
	"github.com/mstar-dev/mstar/reports/results"
)

// gpuSlot is one GPU a worker gets.
type gpuSlot struct {
	Spec  string // the worker's --device: "cuda:K"
	BusID string // for its CPU affinity; "" when unknown
}

var (
	// listGPUs is the host's GPUs; tests replace it.
	listGPUs = cudaGPUs
	// gpuCPUs is the CPUs near a GPU (NVML); tests replace it.
	gpuCPUs = nvmlinfo.CPUAffinity
	// workerEnv is added to the workers' environment (tests: run as mstar).
	workerEnv []string
)

// cudaGPUs lists the CUDA devices the driver sees, without opening them.
func cudaGPUs() ([]gpuSlot, error) {
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, err
	}
	out := make([]gpuSlot, n)
	for k := range out {
		out[k].Spec = fmt.Sprintf("cuda:%d", k)
		out[k].BusID, _ = cuda.DeviceBusID(k)
	}
	return out, nil
}

// pickGPUs resolves --devices: "all", or GPU numbers such as 0,1,3. No GPU
// found is bad input (exit 2), as --device cuda:0 is without one.
func pickGPUs(spec string, list func() ([]gpuSlot, error)) ([]gpuSlot, error) {
	all, err := list()
	if err != nil {
		return nil, usageErr("--devices %s: no GPU found: %v", spec, err)
	}
	if len(all) == 0 {
		return nil, usageErr("--devices %s: no GPU found: the CUDA driver sees none", spec)
	}
	if spec == "all" {
		return all, nil
	}
	var out []gpuSlot
	seen := map[int]bool{}
	for _, p := range strings.Split(spec, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(p))
		switch {
		case err != nil || k < 0:
			return nil, usageErr("--devices %q: want all, or GPU numbers such as 0,1,3", spec)
		case k >= len(all):
			return nil, usageErr("--devices %s: there is no GPU %d: the CUDA driver sees %s (0 to %d)", spec, k, units.Plural(len(all), "GPU"), len(all)-1)
		case seen[k]:
			return nil, usageErr("--devices %s: GPU %d given twice", spec, k)
		}
		seen[k] = true
		out = append(out, all[k])
	}
	return out, nil
}

// fanOut is a measuring command spread over several GPUs (--devices): one
// worker process per GPU, each this binary re-executed on the same command
// line with --device cuda:K and its share of the cells (--shard, split
// again per GPU; every cell with --replicate), its results merged into one
// document whose rows name the GPU that measured them.
type fanOut struct {
	devices   string // --devices
	replicate bool   // --replicate: every GPU runs every cell
	spec      string // --shard as given
	// drop and extra, when set, replace flags of worker k's command line:
	// extra gets the worker's number and the workers' folder.
	drop  []string
	extra func(k int, dir string) ([]string, error)
}

func (f *fanOut) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.devices, "devices", "", "run on the GPUs of `LIST` at once (all, or numbers such as 0,1,3): a worker per GPU on its NUMA-local CPUs, the cells spread over them, one merged document, a per-GPU summary")
	cmd.Flags().BoolVar(&f.replicate, "replicate", false, "with --devices: every GPU runs every cell, to compare the cards, instead of a share of the cells")
}

// check refuses flags a worker per GPU cannot honour; nil without --devices.
func (f *fanOut) check(cmd *cobra.Command, perProcess ...string) error {
	if f.devices == "" {
		if f.replicate {
			return usageErr("--replicate needs --devices")
		}
		return nil
	}
	if cmd.Flags().Changed("device") {
		return usageErr("--device and --devices exclude each other: --devices gives each worker its GPU")
	}
	for _, name := range perProcess {
		if cmd.Flags().Changed(name) {
			return usageErr("--%s is one process's output: leave it out with --devices (or run one GPU per command)", name)
		}
	}
	return nil
}

// workerArgs is the command line of the worker on device: the parent's,
// without what the parent decides, with the worker's device, shard and
// document.
func workerArgs(args []string, device string, sh shard.Shard, out string, drop ...string) []string {
	valued := map[string]bool{"devices": true, "device": true, "out": true, "o": true, "shard": true, "plot": true}
	for _, d := range drop {
		valued[d] = true
	}
	var kept []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-") || a == "-" || a == "--":
		case name == "replicate":
			continue
		case valued[name]:
			if !inline {
				i++
			}
			continue
		case strings.HasPrefix(a, "-o") && !strings.HasPrefix(a, "--"):
			continue
		}
		kept = append(kept, a)
	}
	kept = append(kept, "--device", device, "--out", out)
	if !sh.Whole() {
		kept = append(kept, "--shard", sh.String())
	}
	return kept
}

// withoutFlag is args without the valued flag --name (--name V, --name=V).
func withoutFlag(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--"+name:
			i++
		case strings.HasPrefix(args[i], "--"+name+"="):
		default:
			out = append(out, args[i])
		}
	}
	return out
}

// worker is one GPU's process.
type worker struct {
	slot      gpuSlot
	out, log  string
	pinned    string // "CPUs 0-15", or why not
	cmd       *exec.Cmd
	code      int
	waitError error
}

// lastLine is the last non-empty line of the worker's log.
func (w *worker) lastLine() string {
	b, _ := os.ReadFile(w.log)
	return lastLine(string(b))
}

// cpuList is "0-15,32-47".
func cpuList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// startWorker starts the worker of GPU g, number k of n, on the CPUs near it.
func (a *app) startWorker(f fanOut, k int, g gpuSlot, outer shard.Shard, n int, exe, dir string) (*worker, error) {
	w := &worker{slot: g, out: filepath.Join(dir, fmt.Sprintf("gpu-%d.json", k)), log: filepath.Join(dir, fmt.Sprintf("gpu-%d.log", k))}
	sh := outer
	if !f.replicate {
		sh = outer.Sub(k+1, n)
	}
	args := workerArgs(a.args[1:], g.Spec, sh, w.out, f.drop...)
	if f.extra != nil {
		more, err := f.extra(k, dir)
		if err != nil {
			return nil, err
		}
		args = append(args, more...)
	}
	logf, err := os.Create(w.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy once started
	w.cmd = exec.Command(exe, args...)
	w.cmd.Env = append(os.Environ(), workerEnv...)
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	ownGroup(w.cmd)
	var cpus []int
	w.pinned = "not pinned: the GPU's PCI bus id is unknown"
	if g.BusID != "" {
		if cpus, err = gpuCPUs(g.BusID); err != nil {
			w.pinned = "not pinned: " + err.Error()
		}
	}
	note, err := startPinned(w.cmd, cpus)
	switch {
	case err != nil:
		return nil, fmt.Errorf("starting it: %w", err)
	case note != "":
		w.pinned = note
	case len(cpus) > 0:
		w.pinned = "CPUs " + cpuList(cpus)
	}
	return w, nil
}

// runFanOut runs suite on the GPUs of f.devices and writes the merged
// document to out (after, when set, gets it as a measurement's after hook).
func (a *app) runFanOut(f fanOut, suite, out string, after func(*results.Document) error) error {
	outer, err := shard.Parse(f.spec)
	if err != nil {
		return err
	}
	gpus, err := pickGPUs(f.devices, listGPUs)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary for the workers: %w", err)
	}
	dir, err := os.MkdirTemp("", "mstar-devices-")
	if err != nil {
		return fmt.Errorf("--devices: a folder for the workers: %w", err)
	}
	ctx, stop := interruptContext()
	defer stop()
	ws := make([]*worker, len(gpus))
	var said []string
	for k, g := range gpus {
		w, err := a.startWorker(f, k, g, outer, len(gpus), exe, dir)
		if err != nil {
			for _, started := range ws[:k] { // none runs on without its parent
				started.cmd.Process.Kill()
				started.cmd.Wait()
			}
			return fmt.Errorf("--devices: the worker of %s: %w", g.Spec, err)
		}
		ws[k] = w
		said = append(said, fmt.Sprintf("%s (pid %d, %s)", g.Spec, w.cmd.Process.Pid, w.pinned))
	}
	say(a.stderr, "%s on %s: %s; logs in %s", suite, units.Plural(len(ws), "GPU"), strings.Join(said, ", "), dir)
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.waitError = w.cmd.Wait()
			w.code = w.cmd.ProcessState.ExitCode()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		for _, w := range ws {
			w.cmd.Process.Signal(syscall.SIGINT) // each writes what it finished
		}
		<-done
		return errInterrupted(fmt.Sprintf("%s on %s (the workers' documents and logs are in %s)", suite, units.Plural(len(ws), "GPU"), dir), nil)
	}
	return a.joinWorkers(ws, f, outer, suite, out, dir, after)
}

// joinWorkers merges the workers' documents, prints and writes the result.
func (a *app) joinWorkers(ws []*worker, f fanOut, outer shard.Shard, suite, out, dir string, after func(*results.Document) error) error {
	docs := make([]*results.Document, len(ws))
	bad, cannot := 0, false
	var broken []string
	for k, w := range ws {
		d, err := results.ReadFile(w.out)
		switch {
		case err != nil:
			broken = append(broken, fmt.Sprintf("%s exited %d: %s", w.slot.Spec, w.code, w.lastLine()))
			if w.code == exitBadInput {
				bad++
			}
			continue
		case w.code == exitCannot:
			cannot = true
		}
		docs[k] = d
	}
	if len(broken) > 0 {
		if bad == len(ws) { // the same bad input in every worker
			return usageErr("%s", strings.TrimPrefix(broken[0], ws[0].slot.Spec+" exited 2: "))
		}
		return fmt.Errorf("--devices: %s; the workers' documents and logs are in %s", strings.Join(broken, "; "), dir)
	}
	var part *results.Shard
	var cells []string
	for k, d := range docs {
		d.Command = a.args // one command line: the merge warns of none
		if f.replicate {
			// Every worker ran the same part: joined as runs, not shards.
			part, d.Shard = d.Shard, nil
			d.Command = withoutFlag(a.args, "shard")
			continue
		}
		// Each worker's cells, as shard k+1 of the GPUs of this command's part.
		s := d.Shard
		if s == nil && len(ws) == 1 && outer.Whole() {
			continue // one GPU runs the whole suite
		}
		if s == nil {
			return fmt.Errorf("--devices: %s's document records no shard (a bug)", ws[k].slot.Spec)
		}
		own := len(shard.Pick(outer, make([]struct{}, s.Total)))
		cells = append(cells, s.Cells...)
		part = &results.Shard{Index: outer.Index, Count: outer.Count, Total: s.Total, List: s.List, Cells: cells}
		d.Shard = &results.Shard{Index: k + 1, Count: len(ws), Total: own, List: s.List, Cells: s.Cells}
	}
	m, _, err := reports.MergeNamed(func(i int) string { return ws[i].slot.Spec + "'s " + ws[i].out }, docs...)
	if err != nil {
		return fmt.Errorf("--devices: joining the workers: %v (their documents and logs are in %s)", err, dir)
	}
	m.Command = a.args
	if !outer.Whole() {
		m.Shard = part
	}
	rows, warns := reports.SummarizeGPUs(m)
	m.Warnings = append(m.Warnings, warns...)
	if out != "" {
		if err := a.writeResults(out, m); err != nil {
			return err
		}
	}
	if err := reports.Render(a.stdout, []*results.Document{m}, reports.FormatText, reports.TableOptions{}); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := reports.WriteGPUSummary(&b, rows); err != nil {
		return err
	}
	fmt.Fprint(a.stdout, "\n"+b.String())
	for _, w := range warns {
		say(a.stderr, "warning: %s", w)
	}
	if after != nil {
		if err := after(m); err != nil {
			return err
		}
	}
	os.RemoveAll(dir)
	if gates := m.Failed(); len(gates) > 0 {
		return failed("%s: %s failed:\n  %s", suite, units.Plural(len(gates), "gate"), strings.Join(gates, "\n  "))
	}
	if cannot {
		return cannotTell("%s: no gate failed, but a GPU's run could not tell (exit 4): see its results' gates", suite)
	}
	return nil
}
