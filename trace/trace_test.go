package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/reports/results"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// tick builds a record of session s at tick i, 10 ms apart.
func tick(s string, i int, rung int) Record {
	r := Record{Session: s, Tick: int64(i), Time: t0.Add(time.Duration(i) * 10 * time.Millisecond),
		TargetUS: 10000, CostUS: 100, Headroom: 0.2, Binding: "none", Rung: rung, Action: "none"}
	if i > 0 {
		r.IntervalUS = Ptr(10000)
	}
	return r
}

func readAll(t *testing.T, b []byte) *File {
	t.Helper()
	f, err := Read(bytes.NewReader(b), "t.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestWriterThrottle(t *testing.T) {
	tests := []struct {
		name      string
		every     time.Duration
		rungs     []int // rung per tick
		overrun   map[int]bool
		wantTicks []int64 // kept ticks
	}{
		{"no throttle keeps all", 0, []int{0, 0, 0, 0}, nil, []int64{0, 1, 2, 3}},
		{"every 30ms keeps one in three plus the tail", 30 * time.Millisecond, []int{0, 0, 0, 0, 0, 0, 0, 0}, nil, []int64{0, 3, 6, 7}},
		{"rung changes are never dropped", time.Hour, []int{0, 0, 1, 1, 2, 2, 2, 0}, nil, []int64{0, 2, 4, 7}},
		{"overruns are never dropped", time.Hour, []int{0, 0, 0, 0, 0}, map[int]bool{2: true}, []int64{0, 2, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf, Options{Every: tt.every})
			for i, r := range tt.rungs {
				rec := tick("s", i, r)
				if tt.overrun[i] {
					rec.CostUS = 20000
				}
				if _, err := w.Write(rec); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
				if !json.Valid([]byte(line)) {
					t.Fatalf("line %d is not valid JSON: %s", i+1, line)
				}
			}
			f := readAll(t, buf.Bytes())
			if len(f.Bad) > 0 {
				t.Fatalf("bad lines in our own output: %v", f.Bad)
			}
			var got []int64
			var suppressed int64
			for _, r := range f.Records {
				got = append(got, r.Tick)
				suppressed += r.Suppressed
			}
			if !reflect.DeepEqual(got, tt.wantTicks) {
				t.Errorf("kept ticks (-want +got):\n-%v\n+%v", tt.wantTicks, got)
			}
			st := w.Stats()["s"]
			if st.Written+st.Suppressed != int64(len(tt.rungs)) || suppressed != st.Suppressed {
				t.Errorf("counts: written %d + suppressed %d (in file %d) != %d offered", st.Written, st.Suppressed, suppressed, len(tt.rungs))
			}
			sum := Summarize(f, SummaryOptions{})
			if sum.Sessions[0].Ticks != int64(len(tt.rungs)) {
				t.Errorf("summary ticks %d, want %d", sum.Sessions[0].Ticks, len(tt.rungs))
			}
		})
	}
}

func TestWriterPerSession(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, Options{Every: time.Hour})
	for i := 0; i < 5; i++ {
		w.Write(tick("a", i, 0))
		w.Write(tick("b", i, i%2)) // b changes rung every tick: all kept
	}
	w.Close()
	st := w.Stats()
	if st["a"].Written != 2 || st["a"].Suppressed != 3 {
		t.Errorf("session a: %+v, want 2 written (first and tail) and 3 suppressed", st["a"])
	}
	if st["b"].Written != 5 || st["b"].Suppressed != 0 {
		t.Errorf("session b: %+v, want all 5 written", st["b"])
	}
}

func TestWriterRejectsInvalid(t *testing.T) {
	w := NewWriter(&bytes.Buffer{}, Options{})
	bad := tick("s", 0, 7)
	if _, err := w.Write(bad); err == nil || !strings.Contains(err.Error(), "rung 7") {
		t.Errorf("rung 7 accepted: %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, fmt.Errorf("disk full") }

func TestWriterErrorSticks(t *testing.T) {
	w := NewWriter(failWriter{}, Options{})
	if _, err := w.Write(tick("s", 0, 0)); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("first write: %v", err)
	}
	if _, err := w.Write(tick("s", 1, 0)); err == nil {
		t.Fatal("second write after a failure succeeded")
	}
}

func TestReadBadLines(t *testing.T) {
	var good bytes.Buffer
	w := NewWriter(&good, Options{})
	for i := 0; i < 4; i++ {
		w.Write(tick("s", i, 0))
	}
	w.Close()
	lines := strings.Split(strings.TrimSuffix(good.String(), "\n"), "\n")
	tests := []struct {
		name     string
		text     string
		wantBad  []int // line numbers
		wantRecs int
		wantErr  string // substring of the first bad line's error
	}{
		{"clean", good.String(), nil, 4, ""},
		{"torn last line", strings.Join(lines[:3], "\n") + "\n" + lines[3][:len(lines[3])/2], []int{4}, 3, "torn or garbled"},
		{"garbage in the middle", lines[0] + "\n" + "\x00\xffnot json\n" + strings.Join(lines[1:], "\n") + "\n", []int{2}, 4, "invalid character"},
		{"valid JSON, invalid record", lines[0] + "\n" + `{"session":"","tick":1}` + "\n" + lines[1] + "\n", []int{2}, 2, "no session"},
		{"a field of the wrong type", lines[0] + "\n" + `{"session":5,"tick":1}` + "\n", []int{2}, 1, "column 12: field session: expected a string, found number"},
		{"blank lines skipped", lines[0] + "\n\n\n" + lines[1] + "\n", nil, 2, ""},
		{"over-long line", lines[0] + "\n" + strings.Repeat("x", maxLine+10) + "\n" + lines[1], []int{2}, 2, "longer than"},
		{"empty file", "", nil, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := readAll(t, []byte(tt.text))
			var bad []int
			for _, b := range f.Bad {
				bad = append(bad, b.Line)
			}
			if !reflect.DeepEqual(bad, tt.wantBad) {
				t.Errorf("bad lines (-want +got):\n-%v\n+%v (%v)", tt.wantBad, bad, f.Bad)
			}
			if len(f.Records) != tt.wantRecs {
				t.Errorf("records: got %d, want %d", len(f.Records), tt.wantRecs)
			}
			if tt.wantErr != "" && (len(f.Bad) == 0 || !strings.Contains(f.Bad[0].Err, tt.wantErr)) {
				t.Errorf("bad line error %v, want it to mention %q", f.Bad, tt.wantErr)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	// 10 ticks 10 ms apart, cooldown 30 ms. Rungs: 0 0 1 1 0 0 0 2 2 2.
	// Changes at ticks 2 (0→1), 4 (1→0: a flap, 20 ms after), 7 (0→2).
	rungs := []int{0, 0, 1, 1, 0, 0, 0, 2, 2, 2}
	var recs []Record
	for i, r := range rungs {
		rec := tick("s", i, r)
		rec.CostUS = float64(100 * (i + 1)) // 100..1000
		rec.CooldownUS = 30000
		rec.HostTail = int64(i) << 20
		rec.Headroom = 0.5 - 0.05*float64(i)
		rec.Moved = 1
		if i == 5 {
			rec.IntervalUS = Ptr(12500) // 2.5 ms late
		}
		if i == 9 {
			rec.CostUS = 11000 // overran its 10 ms
		}
		recs = append(recs, rec)
	}
	f := &File{Records: recs, Bad: []BadLine{{Line: 3, Err: "x"}}}
	got := Summarize(f, SummaryOptions{}).Sessions[0]
	checks := []struct {
		what      string
		got, want any
	}{
		{"ticks", got.Ticks, int64(10)},
		{"cost p50", got.Cost.P50, 500.0},
		{"cost p99", got.Cost.P99, 11000.0},
		{"cost max", got.Cost.Max, 11000.0},
		{"overruns", got.Overruns, 1},
		{"jitter max", got.Jitter.Max, 2500.0},
		{"jitter p50", got.Jitter.P50, 0.0},
		{"interval samples (first tick has none)", got.Interval.N, 9},
		{"rung changes", got.RungChanges, 3},
		{"flaps", got.Flaps, 1},
		{"max changes per cooldown", got.MaxChangesPerCooldown, 2},
		{"peak host tail", got.PeakHostTail, int64(9) << 20},
		{"time in resident", got.TimePerRung["resident"], 50 * time.Millisecond},
		{"time in spill-pinned", got.TimePerRung["spill-pinned"], 20 * time.Millisecond},
		{"time in spill-deep (two gaps and the last tick's interval)", got.TimePerRung["spill-deep"], 30 * time.Millisecond},
		{"bytes moved", got.BytesMoved, int64(10)},
		{"span", got.Span, 90 * time.Millisecond},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	if math.Abs(got.MinHeadroom-0.05) > 1e-9 {
		t.Errorf("min headroom %v, want 0.05", got.MinHeadroom)
	}
	var text bytes.Buffer
	if err := Summarize(f, SummaryOptions{}).WriteText(&text); err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(text.String()), " ")
	for _, want := range []string{"ticks 10", "p99 11ms", "rung changes 3", "flaps 1", "peak host tail 9 MiB"} {
		if !strings.Contains(flat, want) {
			t.Errorf("text summary lacks %q:\n%s", want, text.String())
		}
	}
}

func TestSummarizeFlapWindow(t *testing.T) {
	// 0→1 at tick 1, 1→0 at tick 5 (40 ms later): a flap inside a 50 ms
	// window, not inside a 30 ms one.
	rungs := []int{0, 1, 1, 1, 1, 0}
	var recs []Record
	for i, r := range rungs {
		recs = append(recs, tick("s", i, r))
	}
	for _, tt := range []struct {
		window time.Duration
		want   int
	}{{50 * time.Millisecond, 1}, {30 * time.Millisecond, 0}} {
		got := Summarize(&File{Records: recs}, SummaryOptions{FlapWindow: tt.window}).Sessions[0].Flaps
		if got != tt.want {
			t.Errorf("window %v: flaps %d, want %d", tt.window, got, tt.want)
		}
	}
}

func TestQuantilesUnmeasured(t *testing.T) {
	if q := quantiles(nil); q.N != 0 || q.String() != "unmeasured" {
		t.Errorf("no values: %+v %q, want unmeasured", q, q.String())
	}
}

// The committed trace of the CPU acceptance run reads clean, and its ladder
// kept to one rung change per cooldown.
func TestCommittedTrace(t *testing.T) {
	f, err := ReadFile("../reports/measured/spill/cpu-trace.jsonl")
	if err != nil {
		t.Skipf("no committed trace: %v", err)
	}
	if len(f.Bad) > 0 {
		t.Fatalf("bad lines: %v", f.Bad)
	}
	s := Summarize(f, SummaryOptions{})
	if len(s.Sessions) != 9 {
		t.Errorf("%d sessions, want 3 tiers × 3 curves", len(s.Sessions))
	}
	for _, ss := range s.Sessions {
		if ss.Cooldown == 0 || ss.MaxChangesPerCooldown > 1 || ss.Overruns > 0 {
			t.Errorf("%s: %d changes in one cooldown of %s, %d overruns", ss.Session, ss.MaxChangesPerCooldown, ss.Cooldown, ss.Overruns)
		}
	}
}

// Values whose sums, durations or plot axes would overflow are refused as
// garbled records, so summaries and plots never print nonsense or hang.
func TestValidateRefusesOverflowingValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Record)
		want string
	}{
		{"huge headroom", func(r *Record) { r.Headroom = 1e308 }, "headroom"},
		{"negative target", func(r *Record) { r.TargetUS = -5 }, "target_us"},
		{"huge target", func(r *Record) { r.TargetUS = 1e300 }, "target_us"},
		{"huge cooldown", func(r *Record) { r.CooldownUS = 1e300 }, "cooldown_us"},
		{"huge suppressed count", func(r *Record) { r.Suppressed = 1 << 62 }, "suppressed"},
		{"negative demand", func(r *Record) { r.Demand = -1 }, "demand_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tick("s", 0, 0)
			tc.mod(&r)
			if err := r.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	ok := tick("s", 0, 0)
	if err := ok.Validate(); err != nil {
		t.Errorf("a plain record refused: %v", err)
	}
}

// A bad line's column is the one 'mstar report show' gives for the same
// bytes: the wrong byte's 1-based column, or the column after the end.
func TestBadLineColumnsAgreeWithReports(t *testing.T) {
	colRE := regexp.MustCompile(`column (\d+)`)
	for _, line := range []string{`{"session":"a",,"x":1}`, `{"bad`, `{"tick":1}}`} {
		f := readAll(t, []byte(line+"\n"))
		_, rerr := results.Read(strings.NewReader(line), "x")
		if len(f.Bad) != 1 || rerr == nil {
			t.Fatalf("%s: bad %v, reports error %v", line, f.Bad, rerr)
		}
		got, want := colRE.FindStringSubmatch(f.Bad[0].Err), colRE.FindStringSubmatch(rerr.Error())
		if got == nil || want == nil || got[1] != want[1] {
			t.Errorf("%s: trace says %q, report show %q", line, f.Bad[0].Err, rerr)
		}
	}
}

// A file of garbage costs one counter per line, not a kept error each.
func TestReadKeepsFewBadLines(t *testing.T) {
	f := readAll(t, []byte(strings.Repeat("garbage\n", 1000)))
	if len(f.Bad) != MaxBadKept || f.BadCount != 1000 || f.Bad[MaxBadKept-1].Line != MaxBadKept {
		t.Fatalf("kept %d bad lines, counted %d; want %d kept, 1000 counted", len(f.Bad), f.BadCount, MaxBadKept)
	}
	if _, err := Read(bytes.NewReader([]byte("\x00\x00\n")), "z"); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("binary input: %v", err)
	}
}

// FuzzRead: a regulator trace reads without a panic; every line is a
// record, a counted bad line or blank; at most MaxBadKept are kept; and
// the summary of whatever was read does not panic either.
func FuzzRead(f *testing.F) {
	var good bytes.Buffer
	w := NewWriter(&good, Options{})
	for i := 0; i < 3; i++ {
		w.Write(tick("s", i, 0))
	}
	w.Close()
	f.Add(good.Bytes())
	f.Add([]byte("\x00\xffnot json\n{\"session\":\"\",\"tick\":1}\n"))
	f.Add([]byte(`{"session":"s","tick":1e999}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tf, err := Read(bytes.NewReader(data), "fuzz")
		if err != nil {
			return
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		if len(tf.Records)+tf.BadCount > lines || len(tf.Bad) > MaxBadKept || len(tf.Bad) > tf.BadCount {
			t.Fatalf("%d records, %d bad (%d kept) from %d lines", len(tf.Records), tf.BadCount, len(tf.Bad), lines)
		}
		_ = Summarize(tf, SummaryOptions{})
	})
}
