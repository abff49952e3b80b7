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
)

// BadLine is a line Read could not use, and why.
type BadLine struct {
	Line int    `json:"line"`
	Err  string `json:"error"`
}

func (b BadLine) String() string { return fmt.Sprintf("line %d: %s", b.Line, b.Err) }

// File is what Read found: the records it could use, in file order, and the
// lines it could not.
type File struct {
	Name    string
	Records []Record
	Bad     []BadLine
}

// maxLine bounds one line, so a file of garbage without newlines cannot
// exhaust memory; records are a few hundred bytes.
const maxLine = 1 << 20

// Read reads NDJSON records from r. A line that is not a valid record (a
// torn last line, garbage, a record failing Validate) is reported in Bad with
// its line number and skipped; Read keeps going. Blank lines are skipped
// silently. The error is only for failing to read r at all.
func Read(r io.Reader, name string) (*File, error) {
	f := &File{Name: name}
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		b, long, err := readLine(br)
		if long {
			f.Bad = append(f.Bad, BadLine{Line: line, Err: errLong.Error()})
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
	if err := json.Unmarshal(b, &rec); err != nil {
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
		f.Bad = append(f.Bad, BadLine{Line: line, Err: msg})
		return
	}
	if err := rec.Validate(); err != nil {
		f.Bad = append(f.Bad, BadLine{Line: line, Err: "invalid record: " + err.Error()})
		return
	}
	f.Records = append(f.Records, rec)
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
