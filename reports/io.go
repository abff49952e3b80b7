package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"
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
	if err := writeFileAtomic(path, b); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func writeFileAtomic(path string, b []byte) error {
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
// an NDJSON stream (see StreamWriter), and validates it.
func ReadFile(path string) (*Document, error) {
	b, err := os.ReadFile(path)
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
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return parse(b, name)
}

var utf8BOM = []byte("\xef\xbb\xbf")

// parse decides the form from the bytes alone (never from a content type or
// charset): a stream's first line is a complete JSON object whose "record"
// is "header"; anything else is read as one JSON document.
func parse(b []byte, name string) (*Document, error) {
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
		return nil, jsonError(b, 0, err)
	}
	return &d, nil
}

// jsonError turns an encoding/json error into one line with the line and
// column it happened at. base is the line number of b's first line minus
// one (for NDJSON records).
func jsonError(b []byte, base int, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		if strings.HasPrefix(se.Error(), "unexpected end of JSON input") {
			line, col := position(b, int64(len(b)))
			return fmt.Errorf("line %d, column %d: unexpected end of input (truncated file?)", base+line, col)
		}
		// Offset is just past the byte that was wrong.
		line, col := position(b, max(se.Offset-1, 0))
		return fmt.Errorf("line %d, column %d: %s", base+line, col, se.Error())
	case errors.As(err, &te):
		// Offset is just past the value of the wrong type.
		line, col := position(b, max(te.Offset-1, 0))
		what := "the document"
		if te.Field != "" {
			what = "field " + te.Field
		}
		return fmt.Errorf("line %d, column %d: %s: expected %s, found %s", base+line, col, what, kindName(te.Type), te.Value)
	default:
		// Errors from a field's own decoder (a malformed time) carry no
		// offset; a single NDJSON line still has its number.
		if !bytes.Contains(b, []byte("\n")) {
			return fmt.Errorf("line %d: %v", base+1, err)
		}
		return err
	}
}

func kindName(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// position converts a byte offset into a 1-based line and column (columns
// count bytes, as editors' "go to byte" does for ASCII JSON).
func position(b []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(b)))
	head := b[:off]
	line = 1 + bytes.Count(head, []byte("\n"))
	col = int(off) - (bytes.LastIndexByte(head, '\n') + 1) + 1
	return line, col
}
