// Package gpu is mstar's device layer: one Device interface with two
// backends, the CPU (host memory, goroutines) and CUDA (the driver API reached
// at run time through purego, see package cuda). Suites are written against
// Device so that every suite runs, and is tested, without a GPU.
package gpu

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
)

// Backend names a device implementation.
type Backend string

const (
	CPU  Backend = "cpu"
	CUDA Backend = "cuda"
)

// Info describes a device. Fields that a backend cannot know are zero.
type Info struct {
	ID        string  `json:"id"`        // "cpu", "cuda:0"
	Backend   Backend `json:"backend"`   //
	Name      string  `json:"name"`      // "NVIDIA H200", CPU model name
	Arch      string  `json:"arch"`      // "sm_90a"; "" on the CPU
	CCMajor   int     `json:"cc_major"`  // compute capability
	CCMinor   int     `json:"cc_minor"`  //
	SMs       int     `json:"sms"`       // multiprocessors (cores on the CPU)
	L2Bytes   int64   `json:"l2_bytes"`  //
	MemBytes  int64   `json:"mem_bytes"` // total device memory
	Driver    string  `json:"driver"`    // CUDA driver API version, "13.0"
	ClockMHz  int     `json:"clock_mhz"` //
	MemBusBit int     `json:"mem_bus_bits"`
	PCIBusID  string  `json:"pci_bus_id,omitempty"` // "0000:19:00.0": how NVML's view is matched to this device
}

// CC is the compute capability as major*10+minor (90 for an H100/H200);
// 0 on the CPU.
func (i Info) CC() int { return i.CCMajor*10 + i.CCMinor }

// Device is what the suites need of a GPU, or of the CPU standing in for one.
// All methods are safe for concurrent use.
type Device interface {
	Info() Info
	// MemInfo returns free and total device memory in bytes.
	MemInfo() (free, total int64, err error)
	// Alloc returns n bytes of device memory (host memory on the CPU backend).
	Alloc(n int64) (Buffer, error)
	// AllocPinned returns n bytes of page-locked host memory (cuMemHostAlloc);
	// on the CPU backend, ordinary memory. free releases it.
	AllocPinned(n int64) (mem []byte, free func() error, err error)
	// Register page-locks existing host memory (cuMemHostRegister) so copies
	// to and from it run at DMA speed; unregister undoes it. A no-op on the CPU.
	Register(mem []byte) (unregister func() error, err error)
	// NewStream returns an independent queue of copies and events.
	NewStream() (Stream, error)
	// Sync waits for all work on the device.
	Sync() error
	// Close releases the device. Buffers must be freed first.
	Close() error
}

// Buffer is device memory.
type Buffer interface {
	Size() int64
	Free() error
}

// Stream is an ordered queue of device work. Copies to or from page-locked
// host memory are asynchronous on CUDA: the host memory must stay valid and
// untouched until the stream (or an event recorded after the copy) is synced.
// On the CPU backend every operation completes before it returns.
type Stream interface {
	CopyHtoD(dst Buffer, dstOff int64, src []byte) error
	CopyDtoH(dst []byte, src Buffer, srcOff int64) error
	CopyDtoD(dst Buffer, dstOff int64, src Buffer, srcOff, n int64) error
	Memset(dst Buffer, off, n int64, v byte) error
	// Record places an event after all work queued so far.
	Record() (Event, error)
	// WaitEvent makes later work on this stream wait for ev.
	WaitEvent(ev Event) error
	Sync() error
	Close() error
}

// Event marks a point in a stream.
type Event interface {
	// Sync blocks until the work before the event has completed.
	Sync() error
	// Done reports, without blocking, whether that work has completed.
	Done() (bool, error)
	// Since returns the device time between start and this event; both must
	// have completed.
	Since(start Event) (time.Duration, error)
	Close() error
}

// ErrUnsupported is returned for operations a backend cannot do.
var ErrUnsupported = errors.New("not supported by this backend")

// Spec is a parsed --device value.
type Spec struct {
	Auto    bool
	Backend Backend
	Index   int
}

func (s Spec) String() string {
	switch {
	case s.Auto:
		return "auto"
	case s.Backend == CUDA:
		return "cuda:" + strconv.Itoa(s.Index)
	default:
		return string(s.Backend)
	}
}

// ParseSpec parses "auto", "cpu", "cuda" (= cuda:0) or "cuda:N".
func ParseSpec(s string) (Spec, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	switch {
	case s == "auto" || s == "":
		return Spec{Auto: true}, nil
	case s == "cpu":
		return Spec{Backend: CPU}, nil
	case s == "cuda" || s == "gpu":
		return Spec{Backend: CUDA}, nil
	case strings.HasPrefix(s, "cuda:"):
		n, err := strconv.Atoi(s[len("cuda:"):])
		if err != nil || n < 0 {
			return Spec{}, fmt.Errorf("bad device %q: want auto, cpu or cuda:N with N a device index", s)
		}
		return Spec{Backend: CUDA, Index: n}, nil
	}
	return Spec{}, fmt.Errorf("bad device %q: want auto, cpu or cuda:N", s)
}

// briefly is why CUDA did not open, short enough for one line: auto says
// it on every run, so where a missing library was looked for is left to
// doctor.
func briefly(err error) string {
	var nf *cuda.NotFoundError
	if !errors.As(err, &nf) {
		return err.Error()
	}
	return strings.Replace(err.Error(), nf.Error(), nf.Short()+" (see 'mstar doctor')", 1)
}

// Open opens the device a spec names. For "auto" it tries cuda:0 and falls
// back to the CPU; note then says why, for the user to see.
func Open(spec Spec) (d Device, note string, err error) {
	if spec.Auto {
		d, err := openCUDA(0)
		if err == nil {
			return d, "auto: using cuda:0 (" + d.Info().Name + ")", nil
		}
		return NewCPU(), "auto: using the CPU backend: " + briefly(err), nil
	}
	if spec.Backend == CPU {
		return NewCPU(), "", nil
	}
	d, err = openCUDA(spec.Index)
	if err != nil {
		return nil, "", fmt.Errorf("device cuda:%d: %w", spec.Index, err)
	}
	return d, "", nil
}
