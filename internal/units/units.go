// Package units formats byte counts, one way for the whole tool.
package units

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Size prints an exact binary size with the largest unit that divides it:
// "64MiB", "1GiB", "4097B" with sep "", "64 MiB" with sep " ". For sizes
// that name things (cells, parameters, table columns).
func Size(n int64, sep string) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return fmt.Sprintf("%d%s%s", n/u.m, sep, u.s)
		}
	}
	return fmt.Sprintf("%d%sB", n, sep)
}

// Bytes prints any byte count, negative included, to one decimal in the
// largest binary unit under 1024 of it: "1.5 GiB", "160 MiB", "512 B". For
// amounts in messages.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, u := float64(n), ""
	for _, u = range []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"} {
		if f /= unit; f < unit && f > -unit {
			break // an int64 is under 8 EiB: EiB always ends the loop
		}
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", f), ".0") + " " + u
}

var sizeRE = regexp.MustCompile(`(?i)^(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?$`)

// Parse reads a size as people write it: "4096", "4KiB", "64MiB", "1.5GiB",
// "1g" (K, M, G and T are binary units, with or without "iB"/"B"): a whole
// number of bytes from 1 to 1 PiB.
func Parse(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("bad size %q: want bytes or a number with KiB, MiB, GiB or TiB", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("bad size %q: %v", s, err)
	}
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[strings.ToUpper(m[2])]
	n := v * float64(int64(1)<<shift)
	if n < 1 || n > 1<<50 || n != float64(int64(n)) {
		return 0, fmt.Errorf("bad size %q: want a whole number of bytes between 1 and 1 PiB", s)
	}
	return int64(n), nil
}

// Plural is "1 file", "2 files": a count and its noun.
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// TextWidth is the width mstar's text output fits: a 100-column terminal.
const TextWidth = 100

// Wrap breaks each line of s into lines of at most width runes at spaces
// (or after "/", "," and "+" in long words), continuing them with indent;
// width 0 leaves s as it is.
func Wrap(s string, width int, indent string) string {
	if width <= 0 {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = wrapLine(l, width, indent)
	}
	return strings.Join(lines, "\n")
}

// Comment is s as "# " comment lines of at most TextWidth runes, wrapped
// lines continued as "#   ".
func Comment(s string) string { return Wrap("# "+s, TextWidth, "#   ") }

func wrapLine(s string, width int, indent string) string {
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	var out []string
	line := ""
	for _, word := range strings.SplitAfter(s, " ") {
		for _, piece := range splitLong(word, width-utf8.RuneCountInString(indent)) {
			if strings.TrimSpace(line) != "" && utf8.RuneCountInString(line+piece) > width {
				out = append(out, strings.TrimRight(line, " "))
				line, piece = indent, strings.TrimLeft(piece, " ")
			}
			line += piece
		}
	}
	if strings.TrimSpace(line) != "" {
		out = append(out, strings.TrimRight(line, " "))
	}
	return strings.Join(out, "\n")
}

// splitLong cuts a word longer than n after its "/", "," or "+" separators.
func splitLong(word string, n int) []string {
	if n <= 0 || utf8.RuneCountInString(word) <= n {
		return []string{word}
	}
	var out []string
	start := 0
	for i, r := range word {
		if (r == '/' || r == ',' || r == '+') && i+1-start > 0 {
			out = append(out, word[start:i+1])
			start = i + 1
		}
	}
	return append(out, word[start:])
}
