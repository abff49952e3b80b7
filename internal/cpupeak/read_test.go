package cpupeak

import (
	"encoding/binary"
	"testing"
)

// The read loop must sum every word, the tails past the vector loop
// included, or a ceiling measured with it skipped bytes.
func TestReadSumMatchesScalar(t *testing.T) {
	for _, n := range []int{0, 7, 8, 255, 256, 257, 1000, 4096, 4096 + 129} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*31 + 7)
		}
		var want uint64
		for i := 0; i < n; i += 8 {
			var w [8]byte
			copy(w[:], b[i:])
			want += binary.LittleEndian.Uint64(w[:])
		}
		if got := ReadSum(b); got != want {
			t.Errorf("ReadSum of %d bytes = %d, want %d (%s)", n, got, want, ReadMethod())
		}
		if _, got := MeasureRead(b, 3); got != want {
			t.Errorf("MeasureRead of %d bytes on 3 threads sums %d, want %d", n, got, want)
		}
	}
}
