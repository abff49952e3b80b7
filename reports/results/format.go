package results

import (
	"math"
	"strconv"
	"strings"
)

// FormatValue prints a number with about four significant digits and no
// exponent in the range people read (0.001 to 1e15).
func FormatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'g', -1, 64)
	case a >= 1e4 && a < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1e-3 && a < 1e4:
		s := strconv.FormatFloat(v, 'g', 4, 64)
		if strings.ContainsRune(s, 'e') { // 9999.7 rounds to 1e+04
			s = strconv.FormatFloat(v, 'f', 0, 64)
		}
		return s
	}
	return strconv.FormatFloat(v, 'e', 3, 64)
}
