package reports

import (
	"fmt"
	"image/color"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// loadRun is one router's expert loads, layer by layer, in the order the
// results list them.
type loadRun struct {
	router string
	layers []string
	load   [][]float64
}

func loadRuns(rs []Result) []loadRun {
	var runs []loadRun
	at := map[string]int{}
	for _, r := range rs {
		m := r.Metric("expert_load")
		if r.Name != "router/layer" || m == nil || len(m.Samples) == 0 {
			continue
		}
		name := r.Params["router"]
		i, ok := at[name]
		if !ok {
			i = len(runs)
			at[name] = i
			runs = append(runs, loadRun{router: name})
		}
		runs[i].layers = append(runs[i].layers, r.Params["layer"])
		runs[i].load = append(runs[i].load, m.Samples)
	}
	return runs
}

// heatMax caps the heat map's scale (load / mean load) so that one very
// skewed router does not wash out the others.
const heatMax = 4

// loadCells is one router's layers × experts load relative to the mean, as
// a gonum/plot plotter: cells are filled rectangles drawn a hair wider than
// their pitch, so anti-aliasing leaves no seams between them (the stock
// HeatMap shows hairlines at 128+ experts, and its rasterised form blurs).
type loadCells struct {
	z   [][]float64 // [layer][expert]
	pal []color.Color
	max float64
}

func (g loadCells) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	const overlap = vg.Length(0.6)
	for r, row := range g.z {
		for e, v := range row {
			x0, x1 := trX(float64(e)-0.5), trX(float64(e)+0.5)+overlap
			y0, y1 := trY(float64(r)-0.5), trY(float64(r)+0.5)+overlap
			var pa vg.Path
			pa.Move(vg.Point{X: x0, Y: y0})
			pa.Line(vg.Point{X: x1, Y: y0})
			pa.Line(vg.Point{X: x1, Y: y1})
			pa.Line(vg.Point{X: x0, Y: y1})
			pa.Close()
			col := color.Color(color.White) // hotter than the scale
			if v <= g.max {
				col = g.pal[int(v/g.max*float64(len(g.pal)-1)+0.5)]
			}
			c.SetColor(col)
			c.Fill(pa)
		}
	}
}

func (g loadCells) DataRange() (xmin, xmax, ymin, ymax float64) {
	return -0.5, float64(len(g.z[0])) - 0.5, -0.5, float64(len(g.z)) - 0.5
}

// WriteLoadHeatMap draws each router's expert load as a heat map, layers ×
// experts, one panel per router, on a shared colour scale of load / mean
// load (1 = perfectly balanced; the scale stops at heatMax, hotter experts
// are white), as PNG, from the "router/layer" results of ablate router (metric
// expert_load, sample i = expert i).
func WriteLoadHeatMap(w io.Writer, rs []Result) error {
	runs := loadRuns(rs)
	if len(runs) == 0 {
		return fmt.Errorf("heat map: no routers ran")
	}
	hi := 1.0
	grids := make([]loadCells, len(runs))
	for i, run := range runs {
		g := loadCells{z: make([][]float64, len(run.load))}
		for l, load := range run.load {
			total := 0.0
			for _, v := range load {
				total += v
			}
			mean := total / float64(len(load))
			g.z[l] = make([]float64, len(load))
			for e, v := range load {
				if mean > 0 {
					g.z[l][e] = v / mean
				}
				hi = math.Max(hi, g.z[l][e])
			}
		}
		grids[i] = g
	}
	hi = math.Min(hi, heatMax)
	cm := moreland.ExtendedBlackBody()
	cm.SetMin(0)
	cm.SetMax(hi)
	pal := cm.Palette(255).Colors()
	cols := min(3, len(runs))
	rows := (len(runs) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for r := range plots {
		plots[r] = make([]*plot.Plot, cols)
	}
	for i, run := range runs {
		g := grids[i]
		g.pal, g.max = pal, hi
		p := plot.New()
		p.Title.Text = run.router
		p.X.Label.Text = "expert"
		p.Y.Label.Text = "layer"
		p.Y.Tick.Marker = layerTicks(run.layers)
		p.X.Padding, p.Y.Padding = 0, 0
		p.Add(g)
		plots[i/cols][i%cols] = p
	}
	bar := plot.New()
	bar.Title.Text = fmt.Sprintf("load / mean load (1 = balanced; white: %g or more)", hi)
	bar.HideY()
	bar.X.Padding = 0
	cb := &plotter.ColorBar{ColorMap: moreland.ExtendedBlackBody()}
	cb.ColorMap.SetMin(0)
	cb.ColorMap.SetMax(hi)
	bar.Add(cb)

	barH := vg.Inch
	width := vg.Length(cols) * 5 * vg.Inch
	height := vg.Length(rows)*3.2*vg.Inch + barH
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, t, draw.Crop(dc, 0, 0, barH, 0))
	for r := range plots {
		for c := range plots[r] {
			if plots[r][c] != nil {
				plots[r][c].Draw(canvases[r][c])
			}
		}
	}
	bar.Draw(draw.Crop(dc, width/6, -width/6, vg.Millimeter*2, barH-height))
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// layerTicks labels heat-map rows with the model's layer numbers, at most
// about ten of them.
func layerTicks(layers []string) plot.ConstantTicks {
	step := max(1, (len(layers)+9)/10)
	var ticks []plot.Tick
	for i, layer := range layers {
		label := ""
		if i%step == 0 {
			label = layer
		}
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: label})
	}
	return ticks
}
