package reports

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/mstar-dev/mstar/reports/results"
)

func init() { runTables["bench p2p"] = p2pTable }

// p2pTable prints bench p2p's GPU-to-GPU matrices (rows: source, columns:
// destination), bandwidth and latency medians, peer access on then off.
func p2pTable(w io.Writer, d *Document) error {
	type cell struct{ src, dst int }
	med := map[string]map[cell]string{} // "metric/peer" -> cell -> text
	var gpus []int
	for i := range d.Results {
		r := &d.Results[i]
		if r.Name != "p2p" {
			continue
		}
		s, err1 := strconv.Atoi(r.Params["src"])
		t, err2 := strconv.Atoi(r.Params["dst"])
		if err1 != nil || err2 != nil {
			continue
		}
		for _, g := range []int{s, t} {
			if !slices.Contains(gpus, g) {
				gpus = append(gpus, g)
			}
		}
		for _, name := range []string{"bandwidth", "latency"} {
			k := name + "/" + r.Params["peer"]
			if med[k] == nil {
				med[k] = map[cell]string{}
			}
			text := "n/a"
			if m := r.Metric(name); m != nil && m.Measured() {
				text = fmt.Sprintf("%.4g", results.Median(m.Samples))
			}
			if !r.Passed() {
				text += " WRONG"
			}
			med[k][cell{s, t}] = text
		}
	}
	slices.Sort(gpus)
	for _, part := range []struct{ key, title string }{
		{"bandwidth/on", "bandwidth GB/s, peer access on (n/a: no direct path)"},
		{"bandwidth/off", "bandwidth GB/s, peer access off (staged through host memory)"},
		{"latency/on", "latency us per small copy, peer access on"},
		{"latency/off", "latency us per small copy, peer access off"},
	} {
		if med[part.key] == nil {
			continue
		}
		fmt.Fprintf(w, "# %s; rows copy from, columns to\n", part.title)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "src\\dst\t")
		for _, g := range gpus {
			fmt.Fprintf(tw, "cuda:%d\t", g)
		}
		fmt.Fprintln(tw)
		for _, s := range gpus {
			fmt.Fprintf(tw, "cuda:%d\t", s)
			for _, t := range gpus {
				v := med[part.key][cell{s, t}]
				if s == t {
					v = "-"
				}
				fmt.Fprintf(tw, "%s\t", v)
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
