package reports

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

// OutlierFraction is how far below its peers' median a GPU's copy
// bandwidth may fall before the GPU is flagged.
const OutlierFraction = 0.10

// GPURow is one GPU's line of the summary of a document measured on
// several GPUs (mstar --devices, or shards merged from many machines).
type GPURow struct {
	Host, Device, GPU, UUID string
	PCIe                    string // as the environment has it: "gen5 x16 (max gen5 x16)"
	Results                 int
	Compared                int     // copy quantities that peers measured too
	Worst                   string  // the compared quantity furthest below its peers: "h2d ceiling 0.97x"
	WorstRatio              float64 // its ratio to the peers' median (0 when none compared)
	Flags                   []string
}

// copyQuantity names the copy bandwidth a result measures, comparable
// between GPUs ("" when it is none): the ceilings' copies and reads, and
// the arena sweep's pinned and registered copies from 1 MiB up (smaller
// ones time latency; pageable copies vary too much between runs to tell a
// card by).
func copyQuantity(r *Result) string {
	switch {
	case r.Name == "ceiling" && r.Params["what"] != "gemm":
		return r.Params["what"] + " ceiling"
	case r.Name == "copy" && (r.Params["memory"] == "pinned" || r.Params["memory"] == "arena"):
		if n, err := strconv.ParseInt(r.Params["size"], 10, 64); err == nil && n >= 1<<20 {
			return fmt.Sprintf("%s %s %s", r.Params["memory"], r.Params["dir"], r.Params["size"])
		}
	}
	return ""
}

// pcieLink reads the environment's "genG xW (max genMG xMW)".
func pcieLink(s string) (gen, width, maxGen, maxWidth int, ok bool) {
	n, err := fmt.Sscanf(s, "gen%d x%d (max gen%d x%d)", &gen, &width, &maxGen, &maxWidth)
	return gen, width, maxGen, maxWidth, err == nil && n == 4
}

// SummarizeGPUs gives one row per GPU (by host, device and UUID) of a
// document's results, and a warning per flag: a copy bandwidth more than
// OutlierFraction below the median of the other GPUs that measured the
// same quantity, a PCIe link narrower than its maximum, or at a lower
// generation than its maximum while a peer's link runs faster (an idle
// link trains down, so one GPU alone is not flagged for its generation).
// A document of one GPU gives one row and no flags but the width.
func SummarizeGPUs(d *Document) (rows []GPURow, warnings []string) {
	index := map[string]int{}
	medians := map[string]map[int]float64{} // quantity -> row -> median GB/s
	for i := range d.Results {
		r := &d.Results[i]
		env := d.EnvOf(r)
		key := env["host"] + "\x00" + env["device"] + "\x00" + env["gpu.uuid"]
		k, ok := index[key]
		if !ok {
			k = len(rows)
			index[key] = k
			rows = append(rows, GPURow{Host: env["host"], Device: env["device"], GPU: env["gpu"], UUID: env["gpu.uuid"], PCIe: env["pcie"]})
		}
		rows[k].Results++
		q := copyQuantity(r)
		m := r.Metric("bandwidth")
		if q == "" || m == nil || !m.Measured() {
			continue
		}
		if medians[q] == nil {
			medians[q] = map[int]float64{}
		}
		medians[q][k] = results.Median(m.Samples)
	}
	name := func(k int) string {
		g := rows[k]
		s := g.Device
		if g.Host != "" && slices.ContainsFunc(rows, func(o GPURow) bool { return o.Host != g.Host }) {
			s = g.Host + " " + s
		}
		if g.UUID != "" {
			s += " (" + g.UUID + ")"
		}
		return s
	}
	qs := make([]string, 0, len(medians))
	for q := range medians {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	for _, q := range qs {
		byRow := medians[q]
		if len(byRow) < 2 {
			continue
		}
		ks := make([]int, 0, len(byRow))
		for k := range byRow {
			ks = append(ks, k)
		}
		slices.Sort(ks) // warnings in row order
		for _, k := range ks {
			v := byRow[k]
			var peers []float64
			for j, w := range byRow {
				if j != k {
					peers = append(peers, w)
				}
			}
			ref := results.Median(peers)
			if !(ref > 0) {
				continue
			}
			ratio := v / ref
			g := &rows[k]
			g.Compared++
			if g.Worst == "" || ratio < g.WorstRatio {
				g.Worst, g.WorstRatio = fmt.Sprintf("%s %.2fx", q, ratio), ratio
			}
			if ratio < 1-OutlierFraction {
				flag := fmt.Sprintf("%s %.1f GB/s is %.0f%% below its peers' median %.1f GB/s", q, v, 100*(1-ratio), ref)
				g.Flags = append(g.Flags, flag)
				warnings = append(warnings, name(k)+": "+flag)
			}
		}
	}
	fastestGen := 0
	for _, g := range rows {
		if gen, _, _, _, ok := pcieLink(g.PCIe); ok {
			fastestGen = max(fastestGen, gen)
		}
	}
	for k := range rows {
		g := &rows[k]
		gen, width, maxGen, maxWidth, ok := pcieLink(g.PCIe)
		if !ok {
			continue
		}
		var flag string
		switch {
		case width < maxWidth:
			flag = fmt.Sprintf("PCIe link x%d below its max x%d (seated badly, or a slot or riser of fewer lanes)", width, maxWidth)
		case gen < maxGen && gen < fastestGen:
			flag = fmt.Sprintf("PCIe link gen%d below its max gen%d while a peer's runs gen%d", gen, maxGen, fastestGen)
		}
		if flag != "" {
			g.Flags = append(g.Flags, flag)
			warnings = append(warnings, name(k)+": "+flag)
		}
	}
	return rows, warnings
}

// WriteGPUSummary prints the rows as a table, one GPU a line, flags last.
func WriteGPUSummary(w io.Writer, rows []GPURow) error {
	fmt.Fprintln(w, units.Comment(fmt.Sprintf("per-GPU summary (%s): a copy bandwidth more than %.0f%% below its peers' median, or a PCIe link below its max, is flagged", units.Plural(len(rows), "GPU"), 100*OutlierFraction)))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "# device\tgpu\tuuid\tpcie\tresults\tvs peers\tworst\tflags")
	for _, g := range rows {
		dev := g.Device
		if g.Host != "" && slices.ContainsFunc(rows, func(o GPURow) bool { return o.Host != g.Host }) {
			dev = g.Host + " " + dev
		}
		flags := "ok"
		if len(g.Flags) > 0 {
			flags = "FLAG: " + strings.Join(g.Flags, "; ")
		}
		worst := g.Worst
		if worst == "" {
			worst = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", dev, dash(g.GPU), dash(shortUUID(g.UUID)), dash(atMax(g.PCIe)), g.Results, g.Compared, worst, flags)
	}
	return tw.Flush()
}

// shortUUID is a GPU's UUID as the table shows it: "GPU-" and its first 8
// hex digits (as nvidia-smi's short form; unique among a host's cards in
// practice), so the row fits 100 columns; the results keep the whole UUID.
func shortUUID(u string) string {
	if strings.HasPrefix(u, "GPU-") && len(u) > 12 {
		return u[:12]
	}
	return u
}

// atMax is a PCIe link as the table shows it: "gen5 x16" where it runs at
// its max ("gen5 x16 (max gen5 x16)"), else the whole string.
func atMax(link string) string {
	if now, max, ok := strings.Cut(link, " (max "); ok && strings.TrimSuffix(max, ")") == now {
		return now
	}
	return link
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
