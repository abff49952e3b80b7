package reports

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/reports/results"
)

// ExportGoBench writes docs in the Go benchmark format
// (golang.org/design/14313-benchmark-format) so that benchstat and the other
// golang.org/x/perf tools read mstar results:
//
//   - Each environment key becomes a configuration line "key: value", keys
//     sanitised to that format's rules (lower case, no spaces or colons,
//     starting with a letter). A result whose environment differs from the
//     previous one's (merged documents) changes only the keys that differ.
//   - Each sample of each measured metric becomes one line
//     "Benchmark<Name>/<param>=<value>...-1 1 <sample> <metric>-<unit>".
//     The name's first letter is upper-cased, as Go benchmark names are;
//     spaces (and, in parameters, '/' and '=') become '_'.
//     Parameters are sorted by key, as in Result.Key, so benchstat's
//     "/param" projections work on them.
//     The "-1" suffix is the GOMAXPROCS field of the format: mstar results do
//     not depend on it, a constant keeps names pairing across machines (the
//     core count is the "cores" line), and it keeps a parameter value that
//     ends in "-<digits>" from being read as GOMAXPROCS.
//   - The unit is the metric's name and unit joined by '-' ("latency-us",
//     "bandwidth-GB/s"), because benchstat keeps one sample per unit and a
//     result may have several metrics with the same unit. Before a unit's
//     first sample a "Unit <unit> better=lower|higher" metadata line carries
//     the metric's direction, which the format defines for exactly this.
//   - Unmeasured metrics write no samples: unmeasured is not zero.
func ExportGoBench(w io.Writer, docs []*Document) error {
	bw := bufio.NewWriter(w)
	cur := map[string]string{}
	units := map[string]Direction{}
	for _, d := range docs {
		for i := range d.Results {
			r := &d.Results[i]
			next := map[string]string{}
			for k, v := range d.EnvOf(r) {
				if v = oneLine(v); v != "" {
					next[GoBenchKey(k)] = v
				}
			}
			writeConfigChanges(bw, cur, next)
			cur = next
			name := GoBenchName(r)
			for _, m := range r.Metrics {
				if !m.Measured() {
					continue
				}
				unit := GoBenchUnit(m)
				if _, ok := units[unit]; !ok {
					units[unit] = m.Better
					fmt.Fprintf(bw, "Unit %s better=%s\n", unit, m.Better)
				}
				for _, s := range m.Samples {
					fmt.Fprintf(bw, "%s 1 %s %s\n", name, strconv.FormatFloat(s, 'g', -1, 64), unit)
				}
			}
		}
	}
	return bw.Flush()
}

func writeConfigChanges(w io.Writer, cur, next map[string]string) {
	var gone []string
	for k := range cur {
		if _, ok := next[k]; !ok {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	for _, k := range gone {
		fmt.Fprintf(w, "%s:\n", k) // an empty value deletes the key
	}
	keys := make([]string, 0, len(next))
	for k := range next {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if cur[k] != next[k] {
			fmt.Fprintf(w, "%s: %s\n", k, next[k])
		}
	}
}

// GoBenchKey makes an environment key a valid configuration key: lower case,
// no white space or colons, starting with a lower-case letter.
func GoBenchKey(k string) string {
	var b strings.Builder
	for _, r := range k {
		switch {
		case unicode.IsSpace(r) || r == ':':
			b.WriteByte('-')
		case unicode.IsUpper(r):
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	s := b.String()
	if r, _ := utf8.DecodeRuneInString(s); !unicode.IsLower(r) {
		s = "x" + s
	}
	return s
}

// GoBenchName is the benchmark name of a result, with the "-1" suffix.
func GoBenchName(r *Result) string {
	name := benchField(r.Name, "")
	if first, n := utf8.DecodeRuneInString(name); n > 0 {
		name = string(unicode.ToUpper(first)) + name[n:]
	}
	keys := make([]string, 0, len(r.Params))
	for k := range r.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("Benchmark" + name)
	for _, k := range keys {
		fmt.Fprintf(&b, "/%s=%s", benchField(k, "/="), benchField(r.Params[k], "/"))
	}
	b.WriteString("-1")
	return b.String()
}

// GoBenchUnit is "<metric>-<unit>" without white space.
func GoBenchUnit(m Metric) string {
	u := benchField(m.Name, "")
	if m.Unit != "" {
		u += "-" + benchField(m.Unit, "")
	}
	return u
}

// benchField replaces white space and the runes in bad with '_'; an empty
// field becomes "_" so that it still separates.
func benchField(s, bad string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || strings.ContainsRune(bad, r) {
			return '_'
		}
		return r
	}, s)
	if s == "" {
		return "_"
	}
	return s
}

// Merge joins documents, from shards of one run or from several machines,
// into one. Every result keeps the environment it was measured in: the
// merged Env holds the keys on which all results agree, and each result's
// own Env holds the rest (see Document.EnvOf), so tables still group by
// environment and nothing is lost. Merging merged documents works the same.
// Suites and commands that differ are joined and recorded in a warning;
// Start is the earliest start and End the latest end. Every result keeps
// the run it came from (Result.Run), so two runs of one host stay apart;
// the merged document is a new one with a run id of its own. The same run
// given twice (directly or inside merged documents) is refused: its
// samples would count double. Shards of a sweep (--shard) must cover it
// exactly once (CheckShards); the merged document is then whole.
func Merge(docs ...*Document) (*Document, error) {
	m, _, err := MergeNamed(nil, docs...)
	return m, err
}

// MergeNamed is Merge with name labelling document i in the shards'
// refusals (nil: "document i+1"), and it returns CheckShards' notes.
func MergeNamed(name func(i int) string, docs ...*Document) (*Document, []string, error) {
	if len(docs) == 0 {
		return nil, nil, fmt.Errorf("merge: no documents")
	}
	inDoc := map[string]int{}
	for i, d := range docs {
		if err := d.Validate(); err != nil {
			return nil, nil, fmt.Errorf("merge: document %d: %w", i+1, err)
		}
		runs := map[string]bool{}
		if d.RunID != "" && len(d.Results) == 0 {
			runs[d.RunID] = true
		}
		for j := range d.Results {
			if run := d.RunOf(&d.Results[j]); run != "" {
				runs[run] = true
			}
		}
		for run := range runs {
			if k, ok := inDoc[run]; ok {
				return nil, nil, &DuplicateRunError{Run: run, First: k + 1, Second: i + 1}
			}
			inDoc[run] = i
		}
	}
	notes, err := CheckShards(docs, name)
	if err != nil {
		return nil, nil, err
	}
	out := &Document{Format: results.Format, Schema: results.SchemaVersion, RunID: results.NewRunID(time.Now())}
	var suites, commands []string
	seenWarn := map[string]bool{}
	var envs []Env
	for _, d := range docs {
		if !containsString(suites, d.Suite) {
			suites = append(suites, d.Suite)
		}
		if c := strings.Join(d.Command, " "); !containsString(commands, c) {
			commands = append(commands, c)
		}
		if out.Start.IsZero() || (!d.Start.IsZero() && d.Start.Before(out.Start)) {
			out.Start = d.Start
		}
		if d.End.After(out.End) {
			out.End = d.End
		}
		for _, w := range d.Warnings {
			if !seenWarn[w] {
				seenWarn[w] = true
				out.Warnings = append(out.Warnings, w)
			}
		}
		if len(d.Results) == 0 {
			envs = append(envs, d.Env)
		}
		out.Rounds = max(out.Rounds, d.Rounds)
		for i := range d.Results {
			r := d.Results[i]
			env := d.EnvOf(&r)
			envs = append(envs, env)
			r.Env = env // reduced below
			r.Run = d.RunOf(&r)
			if context, derived := roles(d, &r); d.RunID == "" {
				// A document from before roles were declared: the merged
				// one declares what the rule by name says of it.
				r.Metrics = append([]Metric(nil), r.Metrics...)
				for j := range r.Metrics {
					r.Metrics[j].DerivedFrom = derived[r.Metrics[j].Name]
				}
				if context {
					r.Role = RoleContext
				}
			}
			out.Results = append(out.Results, r)
		}
	}
	out.Suite = strings.Join(suites, " + ")
	out.Command = docs[0].Command
	if len(commands) > 1 {
		out.Warnings = append(out.Warnings, fmt.Sprintf("merged %d documents from %d command lines: %s", len(docs), len(commands), strings.Join(commands, " | ")))
	}
	common := Env{}
	for k, v := range envs[0] {
		common[k] = v
	}
	for _, e := range envs[1:] {
		for k, v := range common {
			if ev, ok := e[k]; !ok || ev != v {
				delete(common, k)
			}
		}
	}
	out.Env = common
	for i := range out.Results {
		own := Env{}
		for k, v := range out.Results[i].Env {
			if _, ok := common[k]; !ok {
				own[k] = v
			}
		}
		out.Results[i].Env = nil
		if len(own) > 0 {
			out.Results[i].Env = own
		}
	}
	return out, notes, nil
}

// DuplicateRunError is Merge's refusal of one run given twice.
type DuplicateRunError struct {
	Run           string
	First, Second int // 1-based positions of the documents
}

func (e *DuplicateRunError) Error() string {
	return fmt.Sprintf("merge: documents %d and %d hold the same run %s: merging it twice would count its samples twice", e.First, e.Second, e.Run)
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
