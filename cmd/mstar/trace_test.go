package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/trace"
)

// writeTrace writes a small trace of two sessions and returns its lines.
func writeTrace(t *testing.T) (string, []string) {
	t.Helper()
	var buf bytes.Buffer
	w := trace.NewWriter(&buf, trace.Options{})
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 12; i++ {
		for k, s := range []string{"a", "b"} {
			r := trace.Record{Session: s, Tick: int64(i), Time: t0.Add(time.Duration(i) * 10 * time.Millisecond),
				TargetUS: 10000, CostUS: float64(100 * (i + 1)), Headroom: 0.2, Binding: "none",
				Rung: (i / 4) % 2 * (k + 1), Action: "none", HostTail: int64(i) << 20, CooldownUS: 30000}
			if i > 0 {
				r.IntervalUS = trace.Ptr(10000)
			}
			if _, err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.Close()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	os.WriteFile(path, buf.Bytes(), 0o644)
	return path, strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
}

func TestTraceSummarize(t *testing.T) {
	path, lines := writeTrace(t)
	out, stderr, code := runMstar(t, "trace", "summarize", path)
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"session a", "session b", "ticks 12", "tick cost p50", "interval jitter", "time per rung", "rung changes 2", "flaps 1", "peak host tail 11 MiB"} {
		if !strings.Contains(flat, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	js, _, code := runMstar(t, "trace", "summarize", "--format", "json", path)
	var s trace.Summary
	if code != exitOK || json.Unmarshal([]byte(js), &s) != nil || len(s.Sessions) != 2 || s.Sessions[1].Cost.Max != 1200 {
		t.Errorf("json summary (exit %d): %s", code, js)
	}

	// A torn last line and a garbled one: reported, the rest summarised.
	dir := t.TempDir()
	torn := filepath.Join(dir, "torn.jsonl")
	body := strings.Join(lines[:5], "\n") + "\n#garbage#\n" + strings.Join(lines[5:len(lines)-1], "\n") + "\n" + lines[len(lines)-1][:40]
	os.WriteFile(torn, []byte(body), 0o644)
	out, stderr, code = runMstar(t, "trace", "summarize", torn)
	if code != exitOK {
		t.Fatalf("a partly bad trace: exit %d, want 0 (the rest is summarised): %s", code, stderr)
	}
	last := len(lines) + 1
	for _, want := range []string{"torn.jsonl: line 6:", "torn.jsonl: line " + itoa(last) + ":", "(skipped)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q: %s", want, stderr)
		}
	}
	if flat := strings.Join(strings.Fields(out), " "); !strings.Contains(flat, "2 bad line(s) skipped; the summary covers the other 23 records") || !strings.Contains(flat, "session a") {
		t.Errorf("summary of the rest:\n%s", out)
	}
	_, stderr, code = runMstar(t, "trace", "summarize", "--strict", torn)
	if code != exitBadInput || !strings.Contains(stderr, "--strict") {
		t.Errorf("--strict: exit %d %s", code, stderr)
	}

	for _, tt := range []struct{ name, body, want string }{
		{"only garbage", "nope\n{\n", "no valid trace records"},
		{"empty", "", "no valid trace records"},
	} {
		p := filepath.Join(dir, tt.name+".jsonl")
		os.WriteFile(p, []byte(tt.body), 0o644)
		if _, stderr, code := runMstar(t, "trace", "summarize", p); code != exitBadInput || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: exit %d %s", tt.name, code, stderr)
		}
	}
	if _, stderr, code := runMstar(t, "trace", "summarize", filepath.Join(dir, "missing.jsonl")); code != exitBadInput || !strings.Contains(stderr, "no such file") {
		t.Errorf("missing file: exit %d %s", code, stderr)
	}
	if _, _, code := runMstar(t, "trace", "summarize", "--format", "xml", path); code != exitBadInput {
		t.Errorf("--format xml: exit %d", code)
	}
	if out, stderr, code := runMstar(t, "trace", "summarize", "--flap-window", "-1s", path); code != exitBadInput || out != "" ||
		!strings.Contains(stderr, "--flap-window -1s: must be at least 0s (0: twice the cooldown)") {
		t.Errorf("--flap-window -1s: exit %d, stderr %q, stdout %q", code, stderr, out)
	}
	if _, _, code := runMstar(t, "trace", "frobnicate"); code != exitBadInput {
		t.Errorf("unknown trace subcommand: exit %d", code)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestTracePlot(t *testing.T) {
	path, _ := writeTrace(t)
	dir := t.TempDir()
	png1 := filepath.Join(dir, "t.png")
	out, stderr, code := runMstar(t, "trace", "plot", path, "-o", png1)
	if code != exitOK || !strings.Contains(out, "wrote") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	f, err := os.Open(png1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("not a PNG: %v", err)
	}
	if _, _, code := runMstar(t, "trace", "plot", path, "-o", filepath.Join(dir, "b.svg"), "--session", "b"); code != exitOK {
		t.Errorf("svg of one session: exit %d", code)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no -o", []string{"trace", "plot", path}, "-o is required"},
		{"gif", []string{"trace", "plot", path, "-o", filepath.Join(dir, "t.gif")}, ".png or .svg"},
		{"unknown session", []string{"trace", "plot", path, "-o", filepath.Join(dir, "u.png"), "--session", "zz"}, "zz"},
	} {
		if _, stderr, code := runMstar(t, tt.args...); code != exitBadInput || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: exit %d %s", tt.name, code, stderr)
		}
	}
}

// A results document given to trace summarize, or a trace to report show,
// is named for what it is (not 1 error per line), exit 2.
func TestTraceAndResultsDocumentsToldApart(t *testing.T) {
	path, lines := writeTrace(t)
	doc := latencyDoc(t, t.TempDir(), "doc.json", 1, 6, 50, 0.01)
	stdout, stderr, code := runMstar(t, "trace", "summarize", doc)
	if code != exitBadInput || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "this is a results document; use mstar report show") {
		t.Errorf("trace summarize on a results document: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	_, stderr, code = runMstar(t, "report", "show", path)
	if code != exitBadInput || !strings.Contains(stderr, "this is a trace; use mstar trace summarize") {
		t.Errorf("report show on a trace: exit %d: %s", code, stderr)
	}
	// A routing file (route's and --routing-out's JSON Lines) likewise.
	routing := filepath.Join(t.TempDir(), "routing.jsonl")
	os.WriteFile(routing, []byte(`{"format":"mstar.routing-trace","experts":4,"topk":2}`+"\n"+`{"layer":0,"ids":[0,1],"weights":[0.5,0.5]}`+"\n"), 0o644)
	_, stderr, code = runMstar(t, "report", "show", routing)
	if code != exitBadInput || !strings.Contains(stderr, "this is a routing file; replay it with bench moe --routing-file") {
		t.Errorf("report show on a routing file: exit %d: %s", code, stderr)
	}

	// Many bad lines: the first few, then a count.
	garbled := filepath.Join(t.TempDir(), "garbled.jsonl")
	os.WriteFile(garbled, []byte(strings.Join(lines[:3], "\n")+strings.Repeat("\n{\"torn", 12)+"\n"+lines[3]+"\n"), 0o644)
	_, stderr, code = runMstar(t, "trace", "summarize", garbled)
	if code != exitOK || strings.Count(stderr, "\n") != maxBadLines+1 || !strings.Contains(stderr, "garbled.jsonl: 7 more bad lines (skipped)") {
		t.Errorf("12 bad lines: exit %d, stderr:\n%s", code, stderr)
	}
	_, stderr, code = runMstar(t, "trace", "summarize", "--strict", garbled)
	if code != exitBadInput || strings.Contains(stderr, "skipped") || !strings.Contains(stderr, "12 bad lines (--strict)") {
		t.Errorf("--strict says lines were skipped: exit %d, stderr:\n%s", code, stderr)
	}
}

// "-" reads a results document from stdin, as route --logits - does.
func TestReportShowStdin(t *testing.T) {
	b, err := os.ReadFile(latencyDoc(t, t.TempDir(), "doc.json", 1, 6, 50, 0.01))
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"report", "show", "-"}, bytes.NewReader(b), &out, &errb); code != exitOK || !strings.Contains(out.String(), "latency (us)") {
		t.Errorf("report show -: exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := run([]string{"report", "diff", "-", "-"}, bytes.NewReader(b), &out, &errb); code != exitBadInput || !strings.Contains(errb.String(), "given twice") {
		t.Errorf("report diff - -: exit %d: %s", code, errb.String())
	}
}

// "-" reads the trace from stdin, as the report commands read documents.
func TestTraceSummarizeStdin(t *testing.T) {
	path, _ := writeTrace(t)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"trace", "summarize", "-"}, bytes.NewReader(data), &out, &errb)
	flat := strings.Join(strings.Fields(out.String()), " ")
	if code != exitOK || !strings.Contains(flat, "session a") || !strings.Contains(flat, "session b") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	// A real results document (the H200's measured ceilings), not a stub.
	doc, err := os.ReadFile(filepath.Join("..", "..", "reports", "measured", "h200", "ceilings.json"))
	if err != nil {
		t.Fatal(err)
	}
	code = run([]string{"trace", "summarize", "-"}, bytes.NewReader(doc), &out, &errb)
	if code != exitBadInput || !strings.Contains(errb.String(), "stdin: this is a results document") {
		t.Errorf("a results document on stdin: exit %d, stderr %q", code, errb.String())
	}
}
