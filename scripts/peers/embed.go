// Package peers runs the fused-MoE peers (moe_peers.py, embedded) over the
// layer, weights and routing of a `bench moe` run, and compares them with
// mstar: per batch, each peer's latency over mstar's.
package peers

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mstar-dev/mstar/reports/results"
)

// Script is moe_peers.py.
//
//go:embed moe_peers.py
var Script []byte

// EnvPython names the python to run the peers with (after --python).
const EnvPython = "MSTAR_PYTHON"

// Options configure a peers run.
type Options struct {
	Python     string // the interpreter; "" : $MSTAR_PYTHON, else python3 on PATH
	TritonPeer string // a module path whose fused_experts runs as "triton-ref"
	Impls      string // the script's --impls ("": its default, every peer)
	Samples    int    // per batch and peer (0: the script's 20)
	// MinCopies: each peer rotates through at least this many weight
	// copies, as mstar does under --weight-copies (0 or 1: the L2 rule).
	MinCopies int
	// Device is the CUDA ordinal mstar ran on: the script sees only that
	// device (CUDA_VISIBLE_DEVICES), as its cuda:0.
	Device int
	// Log receives the script's output lines (its progress and tuning).
	Log io.Writer
}

// UnavailableError says why the peers cannot run at all (no python, no
// torch, no CUDA in torch): mstar's own rows stand without them.
type UnavailableError struct{ Reason string }

func (e *UnavailableError) Error() string { return "peers not run: " + e.Reason }

// Python resolves the interpreter: python, else $MSTAR_PYTHON, else python3.
func Python(python string) string {
	if python != "" {
		return python
	}
	if p := os.Getenv(EnvPython); p != "" {
		return p
	}
	return "python3"
}

// CheckTorch runs `import torch` in python and says which torch it is and
// whether it sees a GPU; an *UnavailableError says why not.
func CheckTorch(ctx context.Context, python string) (string, error) {
	path, err := exec.LookPath(python)
	if err != nil {
		return "", &UnavailableError{fmt.Sprintf("no python %q (%v); give --python or $%s", python, errUnwrapped(err), EnvPython)}
	}
	cmd := exec.CommandContext(ctx, path, "-c", "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		why := lastLine(errb.String())
		if why == "" {
			why = err.Error()
		}
		return "", &UnavailableError{fmt.Sprintf("%s cannot import torch (%s); give --python or $%s naming a python that has it", path, why, EnvPython)}
	}
	f := strings.Fields(out.String())
	if len(f) < 3 {
		return "", &UnavailableError{fmt.Sprintf("%s: unexpected answer to the torch check: %q", path, out.String())}
	}
	if f[2] != "True" {
		return "", &UnavailableError{fmt.Sprintf("%s: torch %s (CUDA %s) sees no GPU", path, f[0], f[1])}
	}
	return fmt.Sprintf("%s: torch %s, CUDA %s", path, f[0], f[1]), nil
}

func errUnwrapped(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Run runs the peers over mstarDoc's "moe" results: the script is written
// to a temporary folder and run with python over the same layer (rebuilt
// from the seed), routing (routingPath: bench moe's --routing-out) and, for
// the cross-check, mstar's outputs (dumpDir). It returns the peers'
// document (results named "moe" with impl set to each peer). The script's
// output goes to opt.Log. When ctx ends first, it returns ctx's error with
// the batches the script finished, if any (the document says how many).
func Run(ctx context.Context, opt Options, mstarDoc *results.Document, routingPath, dumpDir string) (*results.Document, error) {
	python := Python(opt.Python)
	if _, err := CheckTorch(ctx, python); err != nil {
		return nil, err
	}
	if opt.TritonPeer != "" {
		if _, err := os.Stat(opt.TritonPeer); err != nil {
			return nil, fmt.Errorf("--triton-peer: %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "mstar-peers-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "moe_peers.py")
	if err := os.WriteFile(script, Script, 0o644); err != nil {
		return nil, err
	}
	mpath, ppath := filepath.Join(dir, "mstar.json"), filepath.Join(dir, "peers.json")
	if err := results.WriteFile(mpath, mstarDoc); err != nil {
		return nil, err
	}
	args := []string{script, "--mstar", mpath, "--routing", routingPath, "--out", ppath}
	if dumpDir != "" {
		args = append(args, "--dump-dir", dumpDir)
	}
	if opt.TritonPeer != "" {
		abs, _ := filepath.Abs(opt.TritonPeer)
		args = append(args, "--triton-peer", abs)
	}
	if opt.Impls != "" {
		args = append(args, "--impls", opt.Impls)
	}
	if opt.Samples > 0 {
		args = append(args, "--samples", strconv.Itoa(opt.Samples))
	}
	if opt.MinCopies > 1 {
		args = append(args, "--min-copies", strconv.Itoa(opt.MinCopies))
	}
	cmd := exec.CommandContext(ctx, Python(opt.Python), args...)
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "CUDA_VISIBLE_DEVICES="+visibleDevice(os.Getenv("CUDA_VISIBLE_DEVICES"), opt.Device))
	// Its own process group: a terminal's Ctrl-C reaches mstar, which
	// stops it when ctx ends, the group whole (a compiler it started too).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var tail []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if opt.Log != nil {
				fmt.Fprintln(opt.Log, "peers: "+line)
			}
			tail = append(tail, line)
			if len(tail) > 8 {
				tail = tail[1:]
			}
		}
		io.Copy(io.Discard, pr)
	}()
	runErr := cmd.Run()
	pw.Close()
	<-done
	if ctx.Err() != nil {
		// The script rewrites its document after each batch: what it
		// finished before it was stopped is kept (nil when nothing was).
		if doc, err := results.ReadFile(ppath); err == nil {
			return doc, ctx.Err()
		}
		return nil, ctx.Err()
	}
	doc, readErr := results.ReadFile(ppath)
	if readErr != nil {
		// The script exits 1 when a peer fails its gate, with the document
		// written; any other failure leaves none.
		why := readErr.Error()
		if runErr != nil {
			why = fmt.Sprintf("%v: %s", runErr, strings.Join(tail, " | "))
		}
		return nil, fmt.Errorf("moe_peers.py: %s", why)
	}
	return doc, nil
}

// visibleDevice is CUDA_VISIBLE_DEVICES for ordinal n given the current
// value: n indexes the devices already visible.
func visibleDevice(current string, n int) string {
	if current == "" {
		return strconv.Itoa(n)
	}
	list := strings.Split(current, ",")
	if n < len(list) {
		return strings.TrimSpace(list[n])
	}
	return strconv.Itoa(n)
}

// Cell is one implementation's latency at one batch.
type Cell struct {
	Impl       string
	US         float64 // median µs; NaN when unmeasured
	Unmeasured string  // why not
	Pass       bool    // its correctness gate passed (a peer that fails is not a "best")
	Gate       string  // the gate's reason when it failed
	PctFloor   float64 // NaN when unknown
}

// Ratio is mstar against every peer at one batch.
type Ratio struct {
	Batch int
	Mstar Cell
	Peers []Cell // in Impls order
	Best  int    // index into Peers of the fastest measured, passing peer; -1 if none
}

// Against is peer_us / mstar_us: above 1, mstar is faster. NaN when either
// is unmeasured.
func (r Ratio) Against(i int) float64 {
	if i < 0 || i >= len(r.Peers) {
		return math.NaN()
	}
	return r.Peers[i].US / r.Mstar.US
}

// Comparison is the ratio table of one run.
type Comparison struct {
	Impls  []string // the peers, in order of first appearance
	Ratios []Ratio  // by batch
}

// Compare pairs the "moe" results of mstar (impl=mstar) and its peers by
// batch size.
func Compare(rs []results.Result) *Comparison {
	c := &Comparison{}
	byBatch := map[int]*Ratio{}
	cells := map[int]map[string]Cell{}
	for _, r := range rs {
		if r.Name != "moe" {
			continue
		}
		m, err := strconv.Atoi(r.Params["batch"])
		if err != nil {
			continue
		}
		impl := r.Params["impl"]
		cell := Cell{Impl: impl, US: math.NaN(), PctFloor: math.NaN(), Pass: r.Passed()}
		if lat := r.Metric("latency"); lat != nil && lat.Measured() {
			cell.US = results.Summarize(lat.Samples).Median
		} else if lat != nil {
			cell.Unmeasured = lat.Unmeasured
		} else {
			cell.Unmeasured = "no latency metric"
		}
		if pf := r.Metric("pct_floor"); pf != nil && pf.Measured() {
			cell.PctFloor = results.Summarize(pf.Samples).Median
		}
		for _, g := range r.Gates {
			if !g.Pass {
				cell.Gate = g.Reason
			}
		}
		if _, ok := byBatch[m]; !ok {
			byBatch[m] = &Ratio{Batch: m, Mstar: Cell{Impl: "mstar", US: math.NaN(), PctFloor: math.NaN(), Unmeasured: "no mstar result"}, Best: -1}
			cells[m] = map[string]Cell{}
		}
		if impl == "mstar" {
			byBatch[m].Mstar = cell
			continue
		}
		if !contains(c.Impls, impl) {
			c.Impls = append(c.Impls, impl)
		}
		cells[m][impl] = cell
	}
	var batches []int
	for m := range byBatch {
		batches = append(batches, m)
	}
	sort.Ints(batches)
	for _, m := range batches {
		r := byBatch[m]
		for _, impl := range c.Impls {
			cell, ok := cells[m][impl]
			if !ok {
				cell = Cell{Impl: impl, US: math.NaN(), PctFloor: math.NaN(), Unmeasured: "no result at this batch"}
			}
			r.Peers = append(r.Peers, cell)
		}
		for i, p := range r.Peers {
			if !math.IsNaN(p.US) && p.Pass && !isBound(p.Impl) && (r.Best < 0 || p.US < r.Peers[r.Best].US) {
				r.Best = i
			}
		}
		c.Ratios = append(c.Ratios, *r)
	}
	return c
}

// isBound: cublas-bmm is a bound (GEMMs only), not a layer, so it is never
// the "best peer".
func isBound(impl string) bool { return impl == "cublas-bmm" }

func contains(v []string, s string) bool {
	for _, x := range v {
		if x == s {
			return true
		}
	}
	return false
}

// Render writes the ratio table: per batch mstar's µs and % of floor, each
// peer's µs and peer/mstar (above 1: mstar is faster), and the best peer;
// then, once each, why a peer was unmeasured or failed its gate.
func (c *Comparison) Render(w io.Writer) {
	var b strings.Builder
	head := []string{"batch", "mstar us", "%floor"}
	for _, impl := range c.Impls {
		label := impl
		if isBound(impl) {
			label += " (bound)"
		}
		head = append(head, label+" us", "ratio")
	}
	head = append(head, "best peer", "ratio")
	rows := [][]string{head}
	type note struct{ impl, why string }
	var notes []note
	seen := map[note]bool{}
	addNote := func(n note) {
		if !seen[n] {
			seen[n] = true
			notes = append(notes, n)
		}
	}
	for _, r := range c.Ratios {
		row := []string{strconv.Itoa(r.Batch), us(r.Mstar), pct(r.Mstar.PctFloor)}
		if r.Mstar.Unmeasured != "" {
			addNote(note{"mstar", r.Mstar.Unmeasured})
		}
		for i, p := range r.Peers {
			switch {
			case p.Unmeasured != "":
				row = append(row, "unmeasured", "-")
				addNote(note{p.Impl, p.Unmeasured})
			case !p.Pass:
				row = append(row, us(p)+" FAIL", "-")
				addNote(note{p.Impl, "correctness gate failed: " + p.Gate})
			default:
				row = append(row, us(p), ratio(r.Against(i)))
			}
		}
		if r.Best >= 0 {
			row = append(row, r.Peers[r.Best].Impl, ratio(r.Against(r.Best)))
		} else {
			row = append(row, "none measured", "-")
		}
		rows = append(rows, row)
	}
	widths := make([]int, len(head))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	for _, row := range rows {
		for i, cell := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(strings.Repeat(" ", widths[i]-len([]rune(cell))))
			b.WriteString(cell)
		}
		b.WriteString("\n")
	}
	b.WriteString("ratio = peer µs / mstar µs: above 1, mstar is faster. The peers' times exclude token\n" +
		"alignment (done once per routing), mstar's include it; cublas-bmm is a bound (the GEMMs alone,\n" +
		"balanced), never the best peer.\n")
	for _, n := range notes {
		fmt.Fprintf(&b, "%s: %s\n", n.impl, n.why)
	}
	io.WriteString(w, b.String())
}

func us(c Cell) string {
	if math.IsNaN(c.US) {
		return "unmeasured"
	}
	return strconv.FormatFloat(c.US, 'f', 1, 64)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", v)
}

func ratio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f×", v)
}
