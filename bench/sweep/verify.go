package sweep

import (
	"bytes"
	"runtime"
	"sync"
	"sync/atomic"
)

// verifyChunk is the least work handed to one goroutine: below it a
// goroutine costs more than it saves.
const verifyChunk = 4 << 20

// countWrong counts the copies of size bytes in got that differ from want
// (both hold len(got)/size copies back to back). Large regions compare on
// every core: at 64 MiB a copy, one core's memcmp took longer than the
// copies it checked (45% of an H200 host's copy sweep).
func countWrong(got, want []byte, size int64) int {
	n := int64(len(got))
	if n == 0 || size <= 0 {
		return 0
	}
	chunk := max(size, verifyChunk/size*size) // whole copies per piece when they are small
	if size > verifyChunk {
		chunk = verifyChunk
	}
	bad := make([]atomic.Bool, (n+size-1)/size)
	eachPiece(n, chunk, func(lo, hi int64) {
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

// clearAll zeroes b on every core when it is large.
func clearAll(b []byte) {
	eachPiece(int64(len(b)), verifyChunk, func(lo, hi int64) { clear(b[lo:hi]) })
}

// eachPiece calls fn over [0,n) in pieces of chunk bytes, on up to
// GOMAXPROCS goroutines.
func eachPiece(n, chunk int64, fn func(lo, hi int64)) {
	pieces := (n + chunk - 1) / chunk
	workers := min(int64(runtime.GOMAXPROCS(0)), pieces)
	if workers <= 1 {
		fn(0, n)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= pieces {
					return
				}
				fn(i*chunk, min(n, (i+1)*chunk))
			}
		}()
	}
	wg.Wait()
}
