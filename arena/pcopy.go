package arena

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Large tensors are copied by several threads: one core's copy of memory
// that is not in cache is bound by its own outstanding misses, not by the
// memory system, so a many-core host moves a 64 MiB tensor several times
// faster with a few threads than with one. Below chunkMin per thread the
// fork and join cost more than they save. On the H200's 16-core host a
// 1 MiB tensor in 8 pieces of 128 KiB went through the arena in 62-89 us,
// in 2 pieces of 512 KiB in 131-169 us (arena/README.md).
const (
	chunkMin          = 128 << 10
	maxDefaultThreads = 8
)

// defaultCopyThreads is half the cores (the other half copy on the other
// side of the pipeline), at most maxDefaultThreads, at least one.
func defaultCopyThreads() int {
	return min(max(runtime.GOMAXPROCS(0)/2, 1), maxDefaultThreads)
}

func resolveThreads(n int) int {
	if n <= 0 {
		return defaultCopyThreads()
	}
	return n
}

// chunks splits n bytes over at most threads pieces of at least chunkMin,
// 4 KiB aligned; it returns the piece size and count.
func chunks(n int64, threads int) (size int64, count int) {
	count = int(min(int64(threads), n/chunkMin))
	if count <= 1 {
		return n, 1
	}
	size = roundUp((n+int64(count)-1)/int64(count), pageSize)
	return size, int((n + size - 1) / size)
}

// parallel runs f over the pieces of n bytes, the first on the calling
// goroutine, and returns the first error.
func parallel(n int64, threads int, f func(off, end int64) error) error {
	size, count := chunks(n, threads)
	if count == 1 {
		return f(0, n)
	}
	var wg sync.WaitGroup
	errs := make([]error, count)
	for i := 1; i < count; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(i) * size
			errs[i] = f(off, min(off+size, n))
		}()
	}
	errs[0] = f(0, min(size, n))
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// OnAllCores runs f over the pieces of n bytes on every core (pieces of at
// least 128 KiB): for work beside the pipeline, such as checking copies.
func OnAllCores(n int64, f func(off, end int64)) {
	_ = parallel(n, runtime.GOMAXPROCS(0), func(off, end int64) error {
		f(off, end)
		return nil
	})
}

// pcopy copies src into dst (len(dst) >= len(src)) on up to threads threads.
func pcopy(dst, src []byte, threads int) {
	_ = parallel(int64(len(src)), threads, func(off, end int64) error {
		copy(dst[off:end], src[off:end])
		return nil
	})
}

// ppwrite writes all of data at offset 0 of fd, in pieces on up to threads
// threads (the same split as the arena's copies, so the file baseline gets
// the same help).
func ppwrite(fd int, data []byte, threads int) error {
	return parallel(int64(len(data)), threads, func(off, end int64) error {
		for off < end {
			n, err := unix.Pwrite(fd, data[off:end], off)
			if err != nil {
				return err
			}
			off += int64(n)
		}
		return nil
	})
}

// ppread fills dst from offset 0 of fd; short is set when the file ended first.
func ppread(fd int, dst []byte, threads int) (short bool, err error) {
	var mu sync.Mutex
	err = parallel(int64(len(dst)), threads, func(off, end int64) error {
		for off < end {
			n, err := unix.Pread(fd, dst[off:end], off)
			if err != nil {
				return err
			}
			if n == 0 {
				mu.Lock()
				short = true
				mu.Unlock()
				return nil
			}
			off += int64(n)
		}
		return nil
	})
	return short, err
}
