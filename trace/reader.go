package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mstar-dev/mstar/internal/jsonpos"
	"github.com/mstar-dev/mstar/internal/limits"
)

// BadLine is a line Read could not use, and why.
type BadLine struct {
	Line int    `json:"line"`
	Err  string `json:"error"`
}

func (b BadLine) String() string { return fmt.Sprintf("line %d: %s", b.Line, b.Err) }

// File is what Read found: the records it could use, in file order, and the
// lines it could not: the first MaxBadKept of them, and their count.
type File struct {
	Name     string
	Records  []Record
	Bad      []BadLine
	BadCount int
}

// MaxBadKept is how many bad lines Read keeps (it counts the rest): a file
// of garbage must not cost memory and time per line.
const MaxBadKept = 10

func (f *File) bad(line int, msg func() string) {
	f.BadCount++
	if len(f.Bad) < MaxBadKept {
		f.Bad = append(f.Bad, BadLine{Line: line, Err: msg()})
	}
}

// maxLine bounds one line, so a file of garbage without newlines cannot
// exhaust memory; records are a few hundred bytes.
const maxLine = 1 << 20

// Read reads NDJSON records from r. A line that is not a valid record (a
// torn last line, garbage, a record failing Validate) is reported in Bad with
// its line number and skipped; Read keeps going. Blank lines are skipped
// silently. The error is for failing to read r at all, for binary data (a
// NUL byte) and for more than limits.MaxInput bytes.
func Read(r io.Reader, name string) (*File, error) {
	f := &File{Name: name}
	lr, err := limits.NewReader(r, true)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(lr, 64<<10)
	for line := 1; ; line++ {
		b, long, err := readLine(br)
		if long {
			f.bad(line, errLong.Error)
		} else if len(b) > 0 {
			f.parse(line, b)
		}
		if err == io.EOF {
			return f, nil
		}
		if err != nil {
			return f, fmt.Errorf("reading %s: line %d: %w", name, line, err)
		}
	}
}

var errLong = errors.New("line longer than 1 MiB")

// readLine returns one line without its newline. An over-long line comes
// back as nil with long set; the rest of it is discarded.
func readLine(br *bufio.Reader) (b []byte, long bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !long && len(b)+len(chunk) <= maxLine {
			b = append(b, chunk...)
		} else {
			long, b = true, nil
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimRight(b, "\r\n"), long, err
	}
}

func (f *File) parse(line int, b []byte) {
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	var rec Record
	// Garbage is refused by its first byte, before the decoder runs.
	if t := bytes.TrimLeft(b, " \t"); t[0] != '{' {
		f.bad(line, func() string {
			return fmt.Sprintf("column 1: invalid character %q where a JSON object starts (torn or garbled line)", clipBytes(t, 16))
		})
		return
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		f.bad(line, func() string {
			msg := err.Error()
			var se *json.SyntaxError
			if errors.As(err, &se) {
				// Offset is just past the wrong byte: its column, as reports
				// counts; at the end of input, the column after it.
				off := se.Offset - 1
				if off+1 >= int64(len(b)) && strings.HasPrefix(se.Error(), "unexpected end of JSON input") {
					off = int64(len(b))
				}
				_, col := jsonpos.Position(b, off)
				msg = fmt.Sprintf("column %d: %v (torn or garbled line)", col, err)
			}
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				// "column C: field session: expected a string, found number",
				// not Go's struct and field names.
				msg = strings.TrimPrefix(jsonpos.Error(b, 0, err).Error(), "line 1, ")
			}
			return msg
		})
		return
	}
	if err := rec.Validate(); err != nil {
		f.bad(line, func() string { return "invalid record: " + err.Error() })
		return
	}
	f.Records = append(f.Records, rec)
}

func clipBytes(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// ReadFile reads a trace file.
func ReadFile(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading trace: %w", err)
	}
	defer fh.Close()
	return Read(fh, path)
}
