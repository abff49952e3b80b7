package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mstar-dev/mstar/internal/jsonpos"
)

// The streaming form of a results document is NDJSON, one record a line:
//
//	{"record":"header","format":"mstar.results","schema":1,"suite":...,"command":[...],"start":...,"env":{...}}
//	{"record":"result","result":{"name":...,"params":{...},"metrics":[...]}}
//	...
//	{"record":"footer","end":...,"warnings":[...]}
//
// A long run writes each result as it is produced, so an interrupted run
// keeps everything measured before the interruption. A stream without its
// footer still reads, with a warning saying the run did not finish. The
// footer's warnings are appended to the header's.

// Record kinds of the streaming form.
const (
	recordHeader = "header"
	recordResult = "result"
	recordFooter = "footer"
)

type streamHeader struct {
	Record   string    `json:"record"`
	Format   string    `json:"format"`
	Schema   int       `json:"schema"`
	Suite    string    `json:"suite"`
	Command  []string  `json:"command"`
	Start    time.Time `json:"start"`
	Env      Env       `json:"env"`
	Warnings []string  `json:"warnings,omitempty"`
	RunID    string    `json:"run_id,omitempty"`
	Rounds   int       `json:"rounds,omitempty"`
}

type streamResult struct {
	Record string  `json:"record"`
	Result *Result `json:"result"`
}

type streamFooter struct {
	Record   string    `json:"record"`
	End      time.Time `json:"end"`
	Warnings []string  `json:"warnings,omitempty"`
}

// StreamWriter writes a document in the streaming form: the header when it
// is made, a record per result as each is added, the footer on Close.
// Each record goes to the underlying writer in one Write call. A
// StreamWriter is not safe for concurrent use.
type StreamWriter struct {
	w       io.Writer
	f       *os.File // set by CreateStream: synced after every record
	d       *Document
	nWarn   int // d.Warnings already in the header
	closed  bool
	lastErr error
}

// NewStreamWriter writes d's header (everything but its results) to w and
// returns a writer for its results. d must validate; results added later are
// validated one by one and appended to d.Results too, so the caller can
// still write the whole document at the end.
func NewStreamWriter(w io.Writer, d *Document) (*StreamWriter, error) {
	head := *d
	head.Results = nil
	if err := head.Validate(); err != nil {
		return nil, err
	}
	s := &StreamWriter{w: w, d: d, nWarn: len(d.Warnings)}
	err := s.record(streamHeader{
		Record: recordHeader, Format: d.Format, Schema: d.Schema, Suite: d.Suite,
		Command: d.Command, Start: d.Start, Env: d.Env, Warnings: d.Warnings, RunID: d.RunID, Rounds: d.Rounds,
	})
	if err != nil {
		return nil, err
	}
	// Results already in d go out now, so the stream holds the whole document.
	for i := range d.Results {
		if err := s.writeResult(&d.Results[i]); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// CreateStream creates (or truncates) path and streams d to it. Every record
// is synced to disk as it is written.
func CreateStream(path string, d *Document) (*StreamWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	s, err := NewStreamWriter(f, d)
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	s.f = f
	return s, f.Sync()
}

// Add writes one result record and appends r to the document.
func (s *StreamWriter) Add(r Result) error {
	if s.closed {
		return fmt.Errorf("stream: add after close")
	}
	one := Document{Format: Format, Schema: SchemaVersion, Results: []Result{r}}
	if err := one.Validate(); err != nil {
		return err
	}
	if err := s.writeResult(&r); err != nil {
		return err
	}
	s.d.Results = append(s.d.Results, r)
	return nil
}

func (s *StreamWriter) writeResult(r *Result) error {
	return s.record(streamResult{Record: recordResult, Result: r})
}

// Close sets the document's End (when it is not set yet), writes the footer
// with the warnings added to the document since the header, and closes the
// file CreateStream opened.
func (s *StreamWriter) Close() error {
	if s.closed {
		return s.lastErr
	}
	s.closed = true
	if s.d.End.IsZero() {
		s.d.Finish()
	}
	err := s.record(streamFooter{Record: recordFooter, End: s.d.End, Warnings: s.d.Warnings[s.nWarn:]})
	if s.f != nil {
		if cerr := s.f.Close(); err == nil {
			err = cerr
		}
	}
	s.lastErr = err
	return err
}

// Abandon closes the file CreateStream opened without writing the footer:
// readers then take the document for an interrupted run's.
func (s *StreamWriter) Abandon() error {
	if s.closed {
		return s.lastErr
	}
	s.closed = true
	if s.f != nil {
		s.lastErr = s.f.Close()
	}
	return s.lastErr
}

func (s *StreamWriter) record(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	if s.f != nil {
		return s.f.Sync()
	}
	return nil
}

// isStream reports whether b's first non-blank line is a stream header.
func isStream(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	line, _, _ := bytes.Cut(b, []byte("\n"))
	var probe struct {
		Record string `json:"record"`
	}
	return json.Unmarshal(line, &probe) == nil && probe.Record == recordHeader
}

// parseStream reads the streaming form; errors carry the line number.
func parseStream(b []byte) (*Document, error) {
	var d *Document
	footer, torn := false, false
	lineNo := 0
	for len(b) > 0 {
		var line []byte
		var endsLine bool
		line, b, endsLine = bytes.Cut(b, []byte("\n"))
		lineNo++
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var kind struct {
			Record string `json:"record"`
		}
		if err := json.Unmarshal(line, &kind); err != nil {
			if len(b) == 0 && !footer && d != nil && !json.Valid(line) && !endsLine {
				// The last record of a run killed while writing it.
				torn = true
				break
			}
			return nil, jsonpos.Error(line, lineNo-1, err)
		}
		if footer {
			return nil, fmt.Errorf("line %d: %q record after the footer", lineNo, kind.Record)
		}
		switch kind.Record {
		case recordHeader:
			if d != nil {
				return nil, fmt.Errorf("line %d: a second header", lineNo)
			}
			var h streamHeader
			if err := json.Unmarshal(line, &h); err != nil {
				return nil, jsonpos.Error(line, lineNo-1, err)
			}
			d = &Document{Format: h.Format, Schema: h.Schema, Suite: h.Suite, Command: h.Command,
				Start: h.Start, Env: h.Env, Warnings: h.Warnings, RunID: h.RunID, Rounds: h.Rounds}
			// Check the version before reading records it may not describe.
			if err := d.Validate(); err != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo, err)
			}
		case recordResult:
			if d == nil {
				return nil, fmt.Errorf("line %d: result before the header", lineNo)
			}
			var r streamResult
			if err := json.Unmarshal(line, &r); err != nil {
				return nil, jsonpos.Error(line, lineNo-1, err)
			}
			if r.Result == nil {
				return nil, fmt.Errorf("line %d: result record without a result", lineNo)
			}
			one := Document{Format: Format, Schema: SchemaVersion, Results: []Result{*r.Result}}
			if err := one.Validate(); err != nil {
				return nil, fmt.Errorf("line %d: %w", lineNo, err)
			}
			d.Results = append(d.Results, *r.Result)
		case recordFooter:
			if d == nil {
				return nil, fmt.Errorf("line %d: footer before the header", lineNo)
			}
			var f streamFooter
			if err := json.Unmarshal(line, &f); err != nil {
				return nil, jsonpos.Error(line, lineNo-1, err)
			}
			d.End = f.End
			d.Warnings = append(d.Warnings, f.Warnings...)
			footer = true
		default:
			return nil, fmt.Errorf("line %d: unknown record %q (want header, result or footer)", lineNo, kind.Record)
		}
	}
	if d == nil {
		return nil, fmt.Errorf("stream has no header")
	}
	d.Results = joinRepeats(d.Results)
	if !footer {
		d.Warnings = append(d.Warnings, WarnInterrupted, WarnNoFooter)
	}
	if torn {
		d.Warnings = append(d.Warnings, fmt.Sprintf("line %d: the last record is torn (the run was killed while writing it) and is left out", lineNo))
	}
	return d, nil
}

// joinRepeats joins the rounds of a --rounds run's stream, which holds each
// round's results as they finished: the k-th result of one key is of round
// k-1 (see roundKey). A stream without repeated keys comes back as it is.
func joinRepeats(rs []Result) []Result {
	seen := map[string]int{}
	var rounds [][]Result
	for _, r := range rs {
		k := r.roundKey()
		round := seen[k]
		seen[k]++
		if round == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[round] = append(rounds[round], r)
	}
	if len(rounds) <= 1 {
		return rs
	}
	return JoinRounds(rounds)
}
