package reports

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

// sweepTables prints a sweep's results as nccl-tests prints its own: one
// line per size, medians of the samples, #wrong summed over them. A metric
// that could not be measured prints "n/a", with the reason below the table.
func sweepTables(w io.Writer, rs []Result) error {
	by := map[string][]Result{}
	for _, r := range rs {
		by[r.Name] = append(by[r.Name], r)
	}
	notes := map[string]bool{}
	med := func(r Result, name string) string {
		m := r.Metric(name)
		if m == nil {
			return ""
		}
		if !m.Measured() {
			notes[name+": "+m.Unmeasured] = true
			return "n/a"
		}
		return sweepNum(results.Median(m.Samples))
	}
	sum := func(r Result, name string) string {
		m := r.Metric(name)
		if m == nil {
			return ""
		}
		t := 0.0
		for _, s := range m.Samples {
			t += s
		}
		return strconv.FormatFloat(t, 'f', 0, 64)
	}
	size := func(r Result) int64 { n, _ := strconv.ParseInt(r.Params["size"], 10, 64); return n }
	order := func(rs []Result, keys ...string) {
		rank := func(r Result) []int {
			out := []int{}
			for _, k := range keys {
				out = append(out, sweepOrder(k, r.Params[k]))
			}
			return out
		}
		sort.SliceStable(rs, func(i, j int) bool {
			if si, sj := size(rs[i]), size(rs[j]); si != sj {
				return si < sj
			}
			ri, rj := rank(rs[i]), rank(rs[j])
			for k := range ri {
				if ri[k] != rj[k] {
					return ri[k] < rj[k]
				}
			}
			return false
		})
	}
	var tw *tabwriter.Writer
	section := func(title string) {
		if tw != nil {
			tw.Flush()
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, units.Comment(title))
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	}
	if rs := by["copy"]; len(rs) > 0 {
		order(rs, "memory", "dir")
		section("copy: host<->device; time per copy, medians; \"both\" is D2H and H2D at once on two streams (GB/s counts both)")
		io.WriteString(tw, "#size(B)\tcount\tmemory\tdir\ttime(us)\tGB/s\t%pinned\t%ceil\t%PCIe\t#wrong\t\n")
		for _, r := range rs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", size(r), sum(r, "count"), r.Params["memory"], r.Params["dir"],
				med(r, "time"), med(r, "bandwidth"), med(r, "pct_pinned"), med(r, "pct_ceiling"), med(r, "pct_pcie"), sum(r, "wrong"))
		}
	}
	if rs := by["register"]; len(rs) > 0 {
		order(rs)
		section("register: cuMemHostRegister of a fresh, committed /dev/shm segment, and its unregister")
		fmt.Fprintln(tw, "#size(B)\tregister(ms)\tunregister(ms)\tms/GiB\t")
		for _, r := range rs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t\n", size(r), med(r, "register"), med(r, "unregister"), med(r, "register_per_gib"))
		}
	}
	if rs := by["transport"]; len(rs) > 0 {
		order(rs, "transport")
		section("transport: producer -> consumer through the arena or per-tensor files, next to a one-thread memcpy; time per tensor, medians")
		io.WriteString(tw, "#size(B)\tcount\ttransport\ttime(us)\ttensors/s\tGB/s\t%memcpy\tvs file\t#wrong\t\n")
		for _, r := range rs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", size(r), sum(r, "count"), r.Params["transport"],
				med(r, "time"), med(r, "tensors_per_s"), med(r, "bandwidth"), med(r, "pct_memcpy"), med(r, "vs_file"), sum(r, "wrong"))
		}
	}
	if tw != nil {
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	var ns []string
	for n := range notes {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	for _, n := range ns {
		if _, err := fmt.Fprintln(w, units.Comment("n/a: "+n)); err != nil {
			return err
		}
	}
	return nil
}

// indexOf ranks a parameter value in table order.
func sweepOrder(key, v string) int {
	// The orders the sweep measures in (bench/sweep: Memory, Directions, its transports).
	lists := map[string][]string{"memory": {"pageable", "shm", "arena", "pinned"}, "dir": {"d2h", "h2d", "both"}, "transport": {"memcpy", "memcpy-2t", "arena", "file"}}
	for i, s := range lists[key] {
		if s == v {
			return i
		}
	}
	return 99
}

// formatNum prints 3-4 significant digits.
func sweepNum(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "NaN"
	case a == 0:
		return "0"
	case a >= 1e4:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.995: // rounds to 1.00, not "1"
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// sweepTable is arena sweep's run table: a header naming the device, the
// samples per point and the rounds, then its tables.
func sweepTable(w io.Writer, d *Document) error {
	samples := 1
	for _, r := range d.Results {
		for _, m := range r.Metrics {
			samples = max(samples, len(m.Samples))
		}
		if r.Name == "copy" || r.Name == "transport" {
			break // register's three metrics have as many; count's one per sample too
		}
	}
	head := fmt.Sprintf("arena sweep on %s, %d samples per point", deviceLine(d), samples)
	if d.Rounds > 1 {
		// The samples of every round are joined: say how many each round took.
		head = fmt.Sprintf("arena sweep on %s, %d samples per point in each of %d rounds", deviceLine(d), samples/d.Rounds, d.Rounds)
	}
	fmt.Fprintln(w, units.Comment(head))
	if d.Env["backend"] == "cpu" && slices.ContainsFunc(d.Results, func(r Result) bool { return r.Name == "copy" }) {
		// The CPU backend's "device" is host memory: its copy rows time
		// memcpy between host buffers, which tests the code, not a bus.
		fmt.Fprintln(w, units.Comment("note: CPU backend: the copy rows time memcpy between host buffers (its device memory is host memory): they check the code paths, not a bus; %pinned and %ceil over 100 are noise"))
	}
	return sweepTables(w, d.Results)
}
