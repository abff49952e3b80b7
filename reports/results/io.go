package results

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/mstar-dev/mstar/internal/jsonpos"
	"github.com/mstar-dev/mstar/internal/limits"
)

// NewDocument starts a document for one run of suite, recording the command
// line and the environment; Start is now and RunID a fresh id.
func NewDocument(suite string, args []string, env Env) *Document {
	start := time.Now()
	return &Document{
		Format:  Format,
		Schema:  SchemaVersion,
		Suite:   suite,
		Command: append([]string(nil), args...),
		Start:   start,
		Env:     env,
		RunID:   NewRunID(start),
	}
}

// Finish records the end of the run.
func (d *Document) Finish() { d.End = time.Now() }

// Write writes d as indented JSON. It refuses a document that does not
// validate, so that a bad document is caught where it is made.
func Write(w io.Writer, d *Document) error {
	b, err := marshal(d)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func marshal(d *Document) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if d.Results == nil {
		// "results": [] says "no results", the same in both forms.
		c := *d
		c.Results = []Result{}
		d = &c
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteFile writes d to path atomically: a temporary file in the same folder
// is written, synced and renamed over path, and the folder is synced, so an
// interrupted run leaves either the old file or the new one, never a torn one.
func WriteFile(path string, d *Document) error {
	b, err := marshal(d)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := WriteFileAtomic(path, b); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// WriteFileAtomic writes b to path the way WriteFile writes a document.
func WriteFileAtomic(path string, b []byte) error {
	// Through a symlink to its target: renaming over the link would
	// replace it and leave the target as it was.
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			return err
		}
		path = target
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	// CreateTemp makes the file 0600; results are ordinary files.
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	// Sync the folder so the rename itself survives a crash. Some file
	// systems cannot sync a folder; the file is in place either way.
	if df, err := os.Open(dir); err == nil {
		df.Sync()
		df.Close()
	}
	return nil
}

// ReadFile reads a results document in either form, a whole JSON document or
// an NDJSON stream (see StreamWriter), plain or gzipped, and validates it. Input that starts
// with a NUL byte, or is larger than limits.MaxInput ($MSTAR_MAX_INPUT,
// default 256 MiB), is refused.
func ReadFile(path string) (*Document, error) {
	b, err := limits.ReadFile(path, true)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return parse(b, path)
}

// Read reads a results document in either form from r; name is used in
// error messages.
func Read(r io.Reader, name string) (*Document, error) {
	b, err := limits.ReadAll(r, true)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return parse(b, name)
}

var (
	utf8BOM   = []byte("\xef\xbb\xbf")
	gzipMagic = []byte{0x1f, 0x8b}
)

// parse decides the form from the bytes alone (never from a content type or
// charset): a stream's first line is a complete JSON object whose "record"
// is "header"; anything else is read as one JSON document.
func parse(b []byte, name string) (*Document, error) {
	if bytes.HasPrefix(b, gzipMagic) {
		// Committed measurements are kept gzipped; the limit holds for
		// what they expand to (a small file can expand without bound).
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err == nil {
			b, err = limits.ReadAll(zr, true)
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: gzip: %w", name, err)
		}
	}
	b = bytes.TrimPrefix(b, utf8BOM)
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("reading %s: empty file", name)
	}
	var d *Document
	var err error
	if isStream(b) {
		d, err = parseStream(b)
	} else {
		d, err = parseWhole(b)
	}
	if err == nil {
		err = d.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return d, nil
}

func parseWhole(b []byte) (*Document, error) {
	// Unmarshal, unlike a Decoder, rejects anything but white space after
	// the document: a torn or concatenated file is not something to ignore.
	var d Document
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, jsonpos.Error(b, 0, err)
	}
	return &d, nil
}
