package traceplot

import (
	"bytes"
	"image/png"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/trace"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func tick(s string, i int, rung int) trace.Record {
	r := trace.Record{Session: s, Tick: int64(i), Time: t0.Add(time.Duration(i) * 10 * time.Millisecond),
		TargetUS: 10000, CostUS: 100, Headroom: 0.2, Binding: "none", Rung: rung, Action: "none"}
	if i > 0 {
		r.IntervalUS = trace.Ptr(10000)
	}
	return r
}

func TestPlot(t *testing.T) {
	var recs []trace.Record
	for i := 0; i < 20; i++ {
		recs = append(recs, tick("a", i, i/5%4), tick("b", i, 0))
	}
	f := &trace.File{Records: recs}
	dir := t.TempDir()
	png1 := filepath.Join(dir, "t.png")
	if err := Plot(f, png1, PlotOptions{Title: "test"}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WritePlot(&buf, "png", f, PlotOptions{}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 500 {
		t.Errorf("image %v is too small for three panels", b)
	}
	buf.Reset()
	if err := WritePlot(&buf, "svg", f, PlotOptions{}); err != nil || !strings.Contains(buf.String(), "<svg") {
		t.Errorf("svg: %v", err)
	}
	errs := []struct {
		name string
		err  error
		want string
	}{
		{"bad extension", Plot(f, filepath.Join(dir, "t.gif"), PlotOptions{}), ".png or .svg"},
		{"no records", Plot(&trace.File{}, filepath.Join(dir, "e.png"), PlotOptions{}), "no records"},
		{"unknown session", Plot(f, filepath.Join(dir, "u.png"), PlotOptions{Sessions: []string{"zz"}}), "session(s) zz"},
	}
	for _, e := range errs {
		if e.err == nil || !strings.Contains(e.err.Error(), e.want) {
			t.Errorf("%s: error %v, want %q", e.name, e.err, e.want)
		}
	}
}
