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
		return fmt.Errorf("line %d, column %d: %s: expected %s, found %s", base+line, col, what, kindName(te.Type), te.Value)
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
