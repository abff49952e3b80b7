package cpupeak

import (
	"encoding/binary"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// ReadMethod names the loop that ReadSum and MeasureRead run.
func ReadMethod() string {
	if _, m := readKernel(); m != "" {
		return m
	}
	return "Go loop of 8-byte loads"
}

// ReadSum returns the sum of b as little-endian uint64 words (a trailing
// partial word counts as zero-padded): a read of every byte whose result
// depends on all of them, so no compiler or CPU can skip a load.
func ReadSum(b []byte) uint64 {
	var sum uint64
	if k, _ := readKernel(); k != nil {
		n := len(b) &^ 255
		sum = k(b[:n])
		b = b[n:]
	}
	return sum + readSumGo(b)
}

func readSumGo(b []byte) uint64 {
	var s0, s1, s2, s3 uint64
	words := len(b) / 8
	if words > 0 {
		w := unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), words)
		i := 0
		for ; i+4 <= len(w); i += 4 {
			s0 += w[i]
			s1 += w[i+1]
			s2 += w[i+2]
			s3 += w[i+3]
		}
		for ; i < len(w); i++ {
			s0 += w[i]
		}
	}
	if tail := b[words*8:]; len(tail) > 0 {
		var pad [8]byte
		copy(pad[:], tail)
		s1 += binary.LittleEndian.Uint64(pad[:])
	}
	return s0 + s1 + s2 + s3
}

// MeasureRead reads b once on threads goroutines at once, each its own
// contiguous share (each locked to its thread), and returns the wall time
// and the sum (for the caller to keep, so the reads are not dead code).
func MeasureRead(b []byte, threads int) (time.Duration, uint64) {
	threads = max(threads, 1)
	chunk := (len(b)/threads + 255) &^ 255
	sums := make([]uint64, threads)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for t := 0; t < threads; t++ {
		lo := min(t*chunk, len(b))
		hi := min(lo+chunk, len(b))
		if t == threads-1 {
			hi = len(b)
		}
		wg.Add(1)
		go func(t int, part []byte) {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			<-start
			sums[t] = ReadSum(part)
		}(t, b[lo:hi])
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	d := time.Since(t0)
	var sum uint64
	for _, s := range sums {
		sum += s
	}
	return d, sum
}
