package sweep

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/mstar-dev/mstar/reports/results"
)

// WriteTable prints a sweep's results as nccl-tests prints its own: one
// line per size, medians of the samples, #wrong summed over them. A metric
// that could not be measured prints "n/a", with the reason below the table.
func WriteTable(w io.Writer, rs []results.Result) error {
	by := map[string][]results.Result{}
	for _, r := range rs {
		by[r.Name] = append(by[r.Name], r)
	}
	notes := map[string]bool{}
	med := func(r results.Result, name string) string {
		m := r.Metric(name)
		if m == nil {
			return ""
		}
		if !m.Measured() {
			notes[name+": "+m.Unmeasured] = true
			return "n/a"
		}
		return formatNum(results.Median(m.Samples))
	}
	sum := func(r results.Result, name string) string {
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
	size := func(r results.Result) int64 { n, _ := strconv.ParseInt(r.Params["size"], 10, 64); return n }
	order := func(rs []results.Result, keys ...string) {
		rank := func(r results.Result) []int {
			out := []int{}
			for _, k := range keys {
				out = append(out, indexOf(k, r.Params[k]))
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
		fmt.Fprintln(w, title)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	}
	if rs := by["copy"]; len(rs) > 0 {
		order(rs, "memory", "dir")
		section("# copy: host<->device; time per copy, medians; \"both\" is D2H and H2D at once on two streams (GB/s counts both)")
		io.WriteString(tw, "#size(B)\tcount\tmemory\tdir\ttime(us)\tGB/s\t%pinned\t%ceil\t%PCIe\t#wrong\t\n")
		for _, r := range rs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", size(r), sum(r, MetricCount), r.Params["memory"], r.Params["dir"],
				med(r, MetricTime), med(r, MetricBandwidth), med(r, MetricPctPinned), med(r, MetricPctCeiling), med(r, MetricPctPCIe), sum(r, MetricWrong))
		}
	}
	if rs := by["register"]; len(rs) > 0 {
		order(rs)
		section("# register: cuMemHostRegister of a fresh, committed /dev/shm segment, and its unregister")
		fmt.Fprintln(tw, "#size(B)\tregister(ms)\tunregister(ms)\tms/GiB\t")
		for _, r := range rs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t\n", size(r), med(r, MetricRegister), med(r, MetricUnregister), med(r, MetricRegPerGiB))
		}
	}
	if rs := by["transport"]; len(rs) > 0 {
		order(rs, "transport")
		section("# transport: producer -> consumer through the arena or per-tensor files, next to a one-thread memcpy; time per tensor, medians")
		io.WriteString(tw, "#size(B)\tcount\ttransport\ttime(us)\ttensors/s\tGB/s\t%memcpy\tvs file\t#wrong\t\n")
		for _, r := range rs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", size(r), sum(r, MetricCount), r.Params["transport"],
				med(r, MetricTime), med(r, MetricTensorsPerS), med(r, MetricBandwidth), med(r, MetricPctMemcpy), med(r, MetricVsFile), sum(r, MetricWrong))
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
		if _, err := fmt.Fprintln(w, "# n/a: "+n); err != nil {
			return err
		}
	}
	return nil
}

// indexOf ranks a parameter value in table order.
func indexOf(key, v string) int {
	lists := map[string][]string{"memory": Memory, "dir": Directions, "transport": {TrMemcpy, TrMemcpy2, TrArena, TrFile}}
	for i, s := range lists[key] {
		if s == v {
			return i
		}
	}
	return 99
}

// formatNum prints 3-4 significant digits.
func formatNum(v float64) string {
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
