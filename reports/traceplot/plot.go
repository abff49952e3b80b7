package traceplot

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mstar-dev/mstar/trace"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// PlotOptions select what Plot draws.
type PlotOptions struct {
	Sessions []string // only these sessions; all when empty
	Title    string
}

// Plot draws a timeline of headroom, rung and host tail, one line per
// session, three panels sharing the time axis, to path (.png or .svg).
func Plot(f *trace.File, path string, opt PlotOptions) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if format != "png" && format != "svg" {
		return fmt.Errorf("plot %s: want a .png or .svg file name", path)
	}
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := WritePlot(out, format, f, opt); err != nil {
		out.Close()
		os.Remove(path)
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// WritePlot writes the plot in format ("png" or "svg") to w.
func WritePlot(w io.Writer, format string, f *trace.File, opt PlotOptions) error {
	want := map[string]bool{}
	for _, s := range opt.Sessions {
		want[s] = true
	}
	by := map[string][]trace.Record{}
	for _, r := range f.Records {
		if len(want) == 0 || want[r.Session] {
			by[r.Session] = append(by[r.Session], r)
		}
	}
	if len(by) == 0 {
		if len(want) > 0 {
			return fmt.Errorf("no records of session(s) %s", strings.Join(opt.Sessions, ", "))
		}
		return fmt.Errorf("no records to plot")
	}
	names := make([]string, 0, len(by))
	for k := range by {
		names = append(names, k)
	}
	sort.Strings(names)
	if opt.Title == "" && len(names) == 1 {
		opt.Title = names[0]
	}
	// Every session's time axis starts at its own first tick, so sessions
	// that ran one after another overlay instead of trailing off.
	panels := []struct {
		title, y string
		value    func(trace.Record) float64
		step     bool
	}{
		{"headroom", "free / budget", func(r trace.Record) float64 { return r.Headroom }, false},
		{"rung", "0 resident · 1 pinned · 2 deep · 3 refuse", func(r trace.Record) float64 { return float64(r.Rung) }, true},
		{"host tail", "MiB", func(r trace.Record) float64 { return float64(r.HostTail) / (1 << 20) }, true},
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		if i == 0 && opt.Title != "" {
			p.Title.Text = opt.Title + ": " + pn.title
		}
		p.Y.Label.Text = pn.y
		p.X.Label.Text = "seconds since the session's first tick"
		p.Add(plotter.NewGrid())
		if pn.step {
			p.Y.Min = 0
		}
		for j, name := range names {
			recs := by[name]
			sort.SliceStable(recs, func(a, b int) bool { return recs[a].Tick < recs[b].Tick })
			xy := make(plotter.XYs, len(recs))
			for k, r := range recs {
				xy[k].X = r.Time.Sub(recs[0].Time).Seconds()
				xy[k].Y = pn.value(r)
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			// Past the palette's colours, dashes tell the sessions apart.
			l.Color = plotutil.Color(j)
			l.Dashes = plotutil.Dashes(j / len(plotutil.DefaultColors))
			l.Width = vg.Points(1.2)
			if pn.step {
				l.StepStyle = plotter.PostStep
			}
			p.Add(l)
			if i == 0 && len(names) > 1 {
				p.Legend.Add(name, l)
			}
		}
		p.Legend.Top = true
		if i == 0 && len(names) > 1 {
			// Room above the lines for the legend's rows (8-point text,
			// ~10 points a row, of a panel's ~150-point data area), so that
			// it covers no data.
			p.Legend.TextStyle.Font.Size = vg.Points(8)
			frac := min(0.7, float64(len(names))*10/150)
			p.Y.Max = p.Y.Min + (p.Y.Max-p.Y.Min)/(1-frac)
		}
		plots[i] = []*plot.Plot{p}
	}
	width, height := 10*vg.Inch, vg.Length(3*len(panels))*vg.Inch
	var c vg.CanvasWriterTo
	if format == "svg" {
		c = vgsvg.New(width, height)
	} else {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseBackgroundColor(color.White))}
	}
	dc := draw.New(c)
	t := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align(plots, t, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	_, err := c.WriteTo(w)
	return err
}
