package sweep

import (
	"bytes"
	"sync/atomic"

	"github.com/mstar-dev/mstar/arena"
)

// countWrong counts the copies of size bytes in got that differ from want
// (both hold len(got)/size copies back to back), comparing on every core:
// at 64 MiB a copy, one core's memcmp took longer than the copies it
// checked (45% of an H200 host's copy sweep).
func countWrong(got, want []byte, size int64) int {
	n := int64(len(got))
	if n == 0 || size <= 0 {
		return 0
	}
	bad := make([]atomic.Bool, (n+size-1)/size)
	arena.OnAllCores(n, func(lo, hi int64) {
		for lo < hi {
			end := min(hi, (lo/size+1)*size) // never across a copy's end
			if !bytes.Equal(got[lo:end], want[lo:end]) {
				bad[lo/size].Store(true)
			}
			lo = end
		}
	})
	wrong := 0
	for i := range bad {
		if bad[i].Load() {
			wrong++
		}
	}
	return wrong
}

// clearAll zeroes b on every core.
func clearAll(b []byte) {
	arena.OnAllCores(int64(len(b)), func(lo, hi int64) { clear(b[lo:hi]) })
}
