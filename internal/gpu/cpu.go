package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cpuDevice is the CPU backend: device memory is host memory and every
// stream operation completes before it returns.
type cpuDevice struct {
	info Info
}

// NewCPU returns the CPU backend.
func NewCPU() Device {
	return &cpuDevice{info: Info{
		ID:       "cpu",
		Backend:  CPU,
		Name:     HostCPUModel(),
		SMs:      runtime.NumCPU(),
		MemBytes: HostMemBytes(),
	}}
}

func (c *cpuDevice) Info() Info { return c.info }

func (c *cpuDevice) MemInfo() (free, total int64, err error) {
	total, free = HostMemBytes(), hostMemAvailable()
	if total == 0 {
		return 0, 0, fmt.Errorf("reading /proc/meminfo: no MemTotal")
	}
	return free, total, nil
}

// HostBuffer is the CPU backend's Buffer. Bytes exposes it, for suites whose
// CPU implementation computes on the memory directly.
type HostBuffer struct {
	mu   sync.Mutex
	data []byte
}

func (b *HostBuffer) Size() int64 { return int64(len(b.data)) }
func (b *HostBuffer) Free() error {
	b.mu.Lock()
	b.data = nil
	b.mu.Unlock()
	return nil
}

// Bytes returns the buffer's memory.
func (b *HostBuffer) Bytes() []byte { return b.data }

func (c *cpuDevice) Alloc(n int64) (Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("alloc: negative size %d", n)
	}
	if free := hostMemAvailable(); free > 0 && n > free {
		return nil, fmt.Errorf("alloc %d bytes: only %d bytes of host memory available", n, free)
	}
	return &HostBuffer{data: make([]byte, n)}, nil
}

func (c *cpuDevice) AllocPinned(n int64) ([]byte, func() error, error) {
	if n < 0 {
		return nil, nil, fmt.Errorf("alloc pinned: negative size %d", n)
	}
	return make([]byte, n), func() error { return nil }, nil
}

func (c *cpuDevice) Register(mem []byte) (func() error, error) {
	return func() error { return nil }, nil
}
func (c *cpuDevice) NewStream() (Stream, error) { return cpuStream{}, nil }
func (c *cpuDevice) Sync() error                { return nil }
func (c *cpuDevice) Close() error               { return nil }

type cpuStream struct{}

func hostBuf(b Buffer) (*HostBuffer, error) {
	h, ok := b.(*HostBuffer)
	if !ok {
		return nil, fmt.Errorf("buffer of type %T does not belong to the CPU backend", b)
	}
	return h, nil
}

func span(what string, off, n, size int64) error {
	if off < 0 || n < 0 || off+n > size {
		return fmt.Errorf("%s: range [%d, %d) outside buffer of %d bytes", what, off, off+n, size)
	}
	return nil
}

func (cpuStream) CopyHtoD(dst Buffer, off int64, src []byte) error {
	d, err := hostBuf(dst)
	if err != nil {
		return err
	}
	if err := span("copy HtoD", off, int64(len(src)), d.Size()); err != nil {
		return err
	}
	copy(d.data[off:], src)
	return nil
}

func (cpuStream) CopyDtoH(dst []byte, src Buffer, off int64) error {
	s, err := hostBuf(src)
	if err != nil {
		return err
	}
	if err := span("copy DtoH", off, int64(len(dst)), s.Size()); err != nil {
		return err
	}
	copy(dst, s.data[off:])
	return nil
}

func (cpuStream) CopyDtoD(dst Buffer, dstOff int64, src Buffer, srcOff, n int64) error {
	d, err := hostBuf(dst)
	if err != nil {
		return err
	}
	s, err := hostBuf(src)
	if err != nil {
		return err
	}
	if err := span("copy DtoD dst", dstOff, n, d.Size()); err != nil {
		return err
	}
	if err := span("copy DtoD src", srcOff, n, s.Size()); err != nil {
		return err
	}
	copy(d.data[dstOff:dstOff+n], s.data[srcOff:srcOff+n])
	return nil
}

func (cpuStream) Memset(dst Buffer, off, n int64, v byte) error {
	d, err := hostBuf(dst)
	if err != nil {
		return err
	}
	if err := span("memset", off, n, d.Size()); err != nil {
		return err
	}
	fill(d.data[off:off+n], v)
	return nil
}

// fill sets every byte of b to v by doubling copies (memmove speed; a byte
// loop ran at ~1 GB/s and was a third of a CPU spill matrix's time).
func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

func (cpuStream) Record() (Event, error)   { return cpuEvent{t: time.Now()}, nil }
func (cpuStream) WaitEvent(ev Event) error { return nil }
func (cpuStream) Sync() error              { return nil }
func (cpuStream) Close() error             { return nil }

type cpuEvent struct{ t time.Time }

func (cpuEvent) Sync() error         { return nil }
func (cpuEvent) Done() (bool, error) { return true, nil }
func (cpuEvent) Close() error        { return nil }
func (e cpuEvent) Since(start Event) (time.Duration, error) {
	s, ok := start.(cpuEvent)
	if !ok {
		return 0, fmt.Errorf("event of type %T does not belong to the CPU backend", start)
	}
	return e.t.Sub(s.t), nil
}

// HostCPUModel is /proc/cpuinfo's model name, or the architecture.
func HostCPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH + " CPU"
}

func meminfo(key string) int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb * 1024
		}
	}
	return 0
}

// HostMemBytes is the host's total memory (MemTotal), 0 when unknown.
func HostMemBytes() int64 { return meminfo("MemTotal") }

func hostMemAvailable() int64 { return meminfo("MemAvailable") }

// HostLastLevelCache is the size in bytes of the largest CPU cache of cpu0
// (sysfs), 0 when it cannot be read: buffers of ceilings must exceed it.
func HostLastLevelCache() int64 {
	var best int64
	paths, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*/size")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if n, ok := parseCacheSize(strings.TrimSpace(string(b))); ok && n > best {
			best = n
		}
	}
	return best
}

// parseCacheSize reads sysfs's "32768K" or "1M".
func parseCacheSize(s string) (int64, bool) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n * mult, true
}
