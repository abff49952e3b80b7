// Package jsonpos says where in its input a JSON decoding error happened,
// as "line L, column C: ...", for every reader of the tool's JSON files.
package jsonpos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Error turns an encoding/json error into one line with the line and
// column it happened at. base is the line number of b's first line minus
// one (for NDJSON records).
func Error(b []byte, base int, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		if strings.HasPrefix(se.Error(), "unexpected end of JSON input") {
			line, col := Position(b, int64(len(b)))
			return fmt.Errorf("line %d, column %d: unexpected end of input (truncated file?)", base+line, col)
		}
		// Offset is just past the byte that was wrong.
		line, col := Position(b, max(se.Offset-1, 0))
		return fmt.Errorf("line %d, column %d: %s", base+line, col, se.Error())
	case errors.As(err, &te):
		// Offset is just past the value of the wrong type.
		line, col := Position(b, max(te.Offset-1, 0))
		what := "the document"
		if te.Field != "" {
			what = "field " + te.Field
		}
		want := kindName(te.Type)
		// A number too large for its field is reported as the wrong
		// type ("expected a number, found number 1e999"): say what it is.
		if v, ok := strings.CutPrefix(te.Value, "number "); ok && (want == "a number" || want == "an integer") {
			return fmt.Errorf("line %d, column %d: %s: %s is out of range for %s", base+line, col, what, v, want)
		}
		return fmt.Errorf("line %d, column %d: %s: expected %s, found %s", base+line, col, what, want, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF): // from a json.Decoder
		line, col := Position(b, int64(len(b)))
		return fmt.Errorf("line %d, column %d: unexpected end of input (truncated file?)", base+line, col)
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

// Position converts a byte offset into a 1-based line and column (columns
// count bytes, as editors' "go to byte" does for ASCII JSON).
func Position(b []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(b)))
	head := b[:off]
	line = 1 + bytes.Count(head, []byte("\n"))
	col = int(off) - (bytes.LastIndexByte(head, '\n') + 1) + 1
	return line, col
}

// NullElement is the offset in b of the first null that is an array's
// element, or -1. encoding/json decodes such a null into a number as
// nothing at all, leaving 0, so the readers of number arrays (logits,
// biases, routing ids and weights) refuse it by this. b must be valid JSON
// (decode it first): strings are skipped, escapes included.
func NullElement(b []byte) int64 {
	var prev byte // the last byte outside strings and blanks
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			prev = '"'
		case ' ', '\t', '\n', '\r':
		case 'n':
			// In an object a comma is followed by a key, never by null.
			if prev == '[' || prev == ',' {
				return int64(i)
			}
			prev = c
		default:
			prev = c
		}
	}
	return -1
}

// NullError is NullElement's finding as an error ("line L, column C: ..."),
// nil where b has no null element.
func NullError(b []byte, base int, want string) error {
	off := NullElement(b)
	if off < 0 {
		return nil
	}
	line, col := Position(b, off)
	return fmt.Errorf("line %d, column %d: null where %s belongs", base+line, col, want)
}

// DuplicateKey finds the first key that one object of b holds twice, at any
// depth: keys compare after unescaping, as a decoder into a map sees them
// (it keeps the last value silently). It returns the key's path ("a.b[2].c"),
// the offsets of its first and second occurrence, and dup = -1 where no
// object repeats a key. b must be valid JSON (decode it first).
func DuplicateKey(b []byte) (path string, first, dup int64) {
	type frame struct {
		name   string           // the path to this object or array
		keys   map[string]int64 // an object's keys so far, by offset
		obj    bool
		key    bool   // an object expecting a key next
		cur    string // the path of the value being read
		nelems int    // an array's elements so far
	}
	var stack []*frame
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber() // numbers stay text: 1e999 is no error here
	// child is the path of the next value in the innermost container.
	child := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.obj {
			return f.cur
		}
		p := fmt.Sprintf("%s[%d]", f.name, f.nelems)
		f.nelems++
		return p
	}
	for {
		start := d.InputOffset()
		tok, err := d.Token()
		if err != nil {
			return "", -1, -1 // io.EOF, or invalid JSON (not this function's to report)
		}
		if n := len(stack); n > 0 && stack[n-1].key {
			f := stack[n-1]
			if delim, ok := tok.(json.Delim); ok && delim == '}' {
				if stack = stack[:n-1]; len(stack) == 0 {
					return "", -1, -1 // the first value is done
				}
				continue
			}
			k, _ := tok.(string)
			// The key's quote follows the '{' or ',' and blanks before it.
			for start < int64(len(b)) && b[start] != '"' {
				start++
			}
			f.cur = k
			if f.name != "" {
				f.cur = f.name + "." + k
			}
			if at, ok := f.keys[k]; ok {
				return f.cur, at, start
			}
			f.keys[k] = start
			f.key = false
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].key = true // after this value, a key or '}'
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{name: child(), keys: map[string]int64{}, obj: true, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{name: child()})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		default:
			child() // a scalar: count it as an array's element
		}
		if len(stack) == 0 {
			return "", -1, -1 // the first value is done
		}
	}
}
