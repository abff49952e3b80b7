package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mstar-dev/mstar/internal/envinfo"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/progress"
	"github.com/mstar-dev/mstar/internal/shard"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

// measurement is what a measuring command hands the run skeleton: the
// suite's name and flags, and the hooks that differ between suites. The
// skeleton does the rest the same way for all: it opens the device, makes
// the document, shows progress, stops on an interrupt, streams each
// finished result beside --out, prints the live table from the results,
// writes --out atomically and says so, and turns the outcome into the exit
// code.
type measurement struct {
	suite  string // the document's suite, and the messages' prefix
	device string // the --device value; "" when the suite opens none
	out    string // --out; "" writes no document
	// steps is the progress bar's length on dev (nil or 0: no bar, only
	// the step descriptions).
	steps func(dev gpu.Device) int
	// shard is --shard: the run hook picks its cells with pickCells (the
	// zero value is the whole suite).
	shard shard.Shard

	// run runs the suite. It hands each finished result to m.sink as soon
	// as it is finished, and returns every result; on an interrupt (ctx
	// canceled) it returns what finished with ctx's error.
	run func(ctx context.Context, m *measuring) (*outcome, error)
	// table prints the live table, rendered from the document's results.
	table func(w io.Writer, doc *results.Document) error
	// after, when set, writes the extra outputs (plots, traces) once the
	// document is written.
	after func(doc *results.Document) error
	// failed, when set, says why a finished run failed (exit 1), or nil;
	// by default a run fails when any gate failed.
	failed func(doc *results.Document) error
}

// measuring is what a suite's run hook gets.
type measuring struct {
	dev   gpu.Device // nil when the suite opens no device
	bar   *progress.Bar
	sink  results.Sink // each finished result, as soon as it is finished
	shard shard.Shard
	part  *results.Shard // the cells this shard owns (pickCells sets it)
	note  io.Writer      // stderr, for what a run says once
	suite string
}

// outcome is what a suite returns: its results and warnings, and for an
// interrupted run how far it got.
type outcome struct {
	results  []results.Result
	warnings []string
	env      results.Env // keys added to the document's environment
	done     string      // "3 of 5 batches done": said when interrupted
	rounds   int         // rounds of the sweep that completed (0: not a rounds sweep)
}

// partialSuffix names the stream of finished results kept beside --out
// while a run goes on: after a crash or a SIGKILL it is what the run
// measured, readable by every report command.
const partialSuffix = ".partial.ndjson"

// measure runs m: the one skeleton of every measuring command.
func (a *app) measure(m measurement) error {
	var dev gpu.Device
	if m.device != "" {
		var err error
		if dev, err = a.openDevice(m.device); err != nil {
			return err
		}
		defer dev.Close()
	}
	doc := results.NewDocument(m.suite, a.args, envinfo.Collect(dev))
	stream, err := openPartial(m.out, doc)
	if err != nil {
		return err
	}
	sinkErr := error(nil)
	sink := func(r results.Result) {
		if stream == nil || sinkErr != nil {
			return
		}
		if sinkErr = stream.add(r); sinkErr != nil {
			say(a.stderr, "warning: %s: %v (the document is still written at the end)", stream.path, sinkErr)
		}
	}
	total := 0
	if m.steps != nil {
		total = m.steps(dev)
	}
	bar := progress.New(a.stderr, total, m.suite)
	// On an interrupt the step in flight stops; the steps done are still
	// printed and written.
	ctx, stop := interruptContext()
	defer stop()
	ms := &measuring{dev: dev, bar: bar, sink: sink, shard: m.shard, note: a.stderr, suite: m.suite}
	res, err := m.run(ctx, ms)
	bar.Finish()
	stopped := err != nil && ctx.Err() != nil && res != nil
	if err != nil && !stopped {
		stream.abandon(a.stderr)
		return err
	}
	if !m.shard.Whole() {
		if ms.part == nil {
			return fmt.Errorf("%s: --shard %s: the suite did not split its cells (a bug)", m.suite, m.shard)
		}
		doc.Shard = ms.part
	}
	doc.Results = append(doc.Results, res.results...)
	doc.Warnings = append(doc.Warnings, res.warnings...)
	doc.Rounds = res.rounds
	for k, v := range res.env {
		doc.Env[k] = v
	}
	if stopped {
		noteInterrupted(doc)
	}
	doc.Finish()
	// --out first: a stdout that cannot be written (a full disk, a closed
	// terminal) must not cost the results.
	if m.out != "" {
		if err := results.WriteFile(m.out, doc); err != nil {
			stream.abandon(a.stderr)
			return err
		}
	}
	stream.remove()
	if m.table != nil {
		if err := m.table(a.stdout, doc); err != nil {
			return err
		}
	}
	if m.out != "" {
		say(a.stderr, "wrote %s", m.out)
	}
	if m.after != nil {
		if err := m.after(doc); err != nil {
			return err
		}
	}
	if stopped {
		what := m.suite
		if res.done != "" {
			what += " (" + res.done + ")"
		}
		return errInterrupted(what, doc.Failed())
	}
	if m.failed != nil {
		return m.failed(doc)
	}
	if bad := doc.Failed(); len(bad) > 0 {
		return failed("%s: %s failed:\n  %s", m.suite, units.Plural(len(bad), "gate"), strings.Join(bad, "\n  "))
	}
	return nil
}

// partial is the stream of finished results beside --out.
type partial struct {
	path string
	w    *results.StreamWriter
	n    int
}

// openPartial starts the stream for out (none without --out).
func openPartial(out string, doc *results.Document) (*partial, error) {
	if out == "" {
		return nil, nil
	}
	path := out + partialSuffix
	head := *doc // the stream keeps its own copy of the results
	head.Results = nil
	w, err := results.CreateStream(path, &head)
	if err != nil {
		return nil, badInput(fmt.Errorf("--out: %w", err))
	}
	return &partial{path: path, w: w}, nil
}

func (p *partial) add(r results.Result) error {
	p.n++
	return p.w.Add(r)
}

// remove deletes the stream once the document is written.
func (p *partial) remove() {
	if p == nil {
		return
	}
	p.w.Close()
	os.Remove(p.path)
}

// abandon keeps the stream when the run failed with finished results in it,
// and says where they are; an empty one goes.
func (p *partial) abandon(stderr io.Writer) {
	if p == nil {
		return
	}
	if p.n == 0 {
		p.remove()
		return
	}
	p.w.Abandon() // no footer: readers mark the document interrupted
	say(stderr, "the %s finished before the error are in %s ('mstar report show' reads it)", units.Plural(p.n, "result"), p.path)
}
