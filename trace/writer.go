package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// Options configure a Writer.
type Options struct {
	// Every is the least trace time between two kept records of one session.
	// Zero keeps every record.
	Every time.Duration
}

// Writer writes records as NDJSON, throttled per session. It is safe for
// concurrent use. The first write error sticks: later writes return it and
// write nothing, so a full disk never slows the caller down further.
type Writer struct {
	mu       sync.Mutex
	w        *bufio.Writer
	closer   io.Closer
	opt      Options
	sessions map[string]*sessionState
	err      error
}

type sessionState struct {
	lastKept   time.Time
	lastRung   int
	seen       bool
	pending    *Record // the last record, when it was suppressed
	suppressed int64   // dropped since the last kept record
	stats      SessionStats
}

// SessionStats counts one session's records.
type SessionStats struct {
	Written    int64 `json:"written"`
	Suppressed int64 `json:"suppressed"`
}

// NewWriter returns a Writer on w. If w is an io.Closer, Close closes it.
func NewWriter(w io.Writer, opt Options) *Writer {
	tw := &Writer{w: bufio.NewWriter(w), opt: opt, sessions: map[string]*sessionState{}}
	if c, ok := w.(io.Closer); ok {
		tw.closer = c
	}
	return tw
}

// Write offers one record. It reports whether the record was kept. A record
// is kept when it is its session's first, changes rung, overran its interval,
// or comes at least Every after the session's last kept record.
func (w *Writer) Write(rec Record) (kept bool, err error) {
	if err := rec.Validate(); err != nil {
		return false, fmt.Errorf("trace record %s tick %d: %w", rec.Session, rec.Tick, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return false, w.err
	}
	s := w.sessions[rec.Session]
	if s == nil {
		s = &sessionState{}
		w.sessions[rec.Session] = s
	}
	keep := !s.seen || rec.Rung != s.lastRung || rec.Overrun() ||
		w.opt.Every <= 0 || rec.Time.Sub(s.lastKept) >= w.opt.Every
	s.seen = true
	s.lastRung = rec.Rung
	if !keep {
		r := rec
		s.pending = &r
		s.suppressed++
		s.stats.Suppressed++
		return false, nil
	}
	rec.Suppressed = s.suppressed
	if err := w.emit(&rec); err != nil {
		return false, err
	}
	s.lastKept = rec.Time
	s.pending = nil
	s.suppressed = 0
	s.stats.Written++
	return true, nil
}

func (w *Writer) emit(rec *Record) error {
	if rec.RungName == "" {
		rec.RungName = RungName(rec.Rung)
	}
	b, err := json.Marshal(rec)
	if err == nil {
		b = append(b, '\n')
		_, err = w.w.Write(b)
	}
	if err == nil {
		// Flushed per record so a crashed run leaves everything up to its end.
		err = w.w.Flush()
	}
	if err != nil {
		w.err = fmt.Errorf("writing trace: %w", err)
	}
	return w.err
}

// Stats returns per-session counts of written and suppressed records.
func (w *Writer) Stats() map[string]SessionStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]SessionStats, len(w.sessions))
	for k, s := range w.sessions {
		out[k] = s.stats
	}
	return out
}

// Suppressed returns the number of records dropped by the throttle so far.
func (w *Writer) Suppressed() int64 {
	var n int64
	for _, s := range w.Stats() {
		n += s.Suppressed
	}
	return n
}

// Flush writes each session's last record if it was suppressed, so that the
// trace ends where the session ended. Close calls it.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	names := make([]string, 0, len(w.sessions))
	for k := range w.sessions {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		s := w.sessions[k]
		if s.pending == nil {
			continue
		}
		rec := *s.pending
		rec.Suppressed = s.suppressed - 1 // the pending record itself is now kept
		if err := w.emit(&rec); err != nil {
			return err
		}
		s.pending = nil
		s.suppressed = 0
		s.stats.Suppressed--
		s.stats.Written++
		s.lastKept = rec.Time
	}
	return nil
}

// Close flushes and closes the underlying writer when it is a Closer.
func (w *Writer) Close() error {
	err := w.Flush()
	if w.closer != nil {
		if cerr := w.closer.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("closing trace: %w", cerr)
		}
	}
	return err
}
