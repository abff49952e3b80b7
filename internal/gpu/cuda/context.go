package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mstar-dev/mstar/internal/sigstack"
)

// Props are a device's facts as the driver reports them. Fields the driver
// does not report (clock attributes are deprecated in CUDA 13) are zero.
type Props struct {
	Ordinal           int
	Name              string
	CCMajor, CCMinor  int
	SMs               int
	L2Bytes           int64
	MemBytes          int64
	ClockMHz          int
	MemClockMHz       int
	MemBusBits        int
	MaxSharedOptin    int // bytes of shared memory a block may opt in to
	MaxThreadsPerBlk  int
	AsyncEngines      int
	PCIBusID          string // "0000:1b:00.0"
	DriverAPI         string // "13.0"
	MaxThreadsPerSM   int
	MaxSharedPerBlock int
	// The persisting L2 set-aside's largest size and an access policy
	// window's largest span, in bytes (0 where the device has none).
	MaxPersistingL2, MaxPolicyWindow int64
}

// Arch is the NVRTC architecture for the device: the architecture-specific
// target ("sm_90a") from Hopper on, so kernels may use wgmma and TMA.
func (p Props) Arch() string { return ArchFor(p.CCMajor, p.CCMinor) }

// ArchFor returns the --gpu-architecture for a compute capability: sm_XYa
// from compute capability 9.0 on (the "a" targets exist there), sm_XY before.
func ArchFor(major, minor int) string {
	if major >= 9 {
		return fmt.Sprintf("sm_%d%da", major, minor)
	}
	return fmt.Sprintf("sm_%d%d", major, minor)
}

// Context is one device's primary context, shared with every other user of
// the device in this process (cuBLAS and the CUDA runtime use the same one).
// All methods are safe for concurrent use.
type Context struct {
	dev    int32
	ctx    uintptr
	props  Props
	closed atomic.Bool

	compOnce sync.Once
	comp     *Compiler
	compErr  error
}

// Open initialises the driver and retains device ordinal's primary context.
func Open(ordinal int) (*Context, error) {
	if err := loadDriver(); err != nil {
		return nil, err
	}
	var n int32
	if err := check(drv.cuDeviceGetCount(&n), "cuDeviceGetCount"); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= int(n) {
		return nil, fmt.Errorf("no CUDA device %d: the driver sees %d device(s)", ordinal, n)
	}
	c := &Context{}
	if err := checkf(drv.cuDeviceGet(&c.dev, int32(ordinal)), "cuDeviceGet(%d)", ordinal); err != nil {
		return nil, err
	}
	err := checkf(drv.cuPrimaryCtxRetain(&c.ctx, c.dev), "cuDevicePrimaryCtxRetain(%d)", ordinal)
	sigstack.Fix() // and may at a context's creation
	if err != nil {
		return nil, err
	}
	p, err := c.readProps(ordinal)
	if err != nil {
		drv.cuPrimaryCtxRelease(c.dev)
		return nil, err
	}
	c.props = p
	return c, nil
}

func (c *Context) readProps(ordinal int) (Props, error) {
	p := Props{Ordinal: ordinal}
	var name [256]byte
	if err := checkf(drv.cuDeviceGetName(&name[0], int32(len(name)), c.dev), "cuDeviceGetName(%d)", ordinal); err != nil {
		return p, err
	}
	p.Name = goString(&name[0])
	attr := func(a int32) int {
		var v int32
		if drv.cuDeviceGetAttr(&v, a, c.dev) != Success {
			return 0 // deprecated or unknown here: leave it zero
		}
		return int(v)
	}
	p.CCMajor = attr(AttrComputeCapabilityMajr)
	p.CCMinor = attr(AttrComputeCapabilityMinr)
	p.SMs = attr(AttrMultiprocessorCount)
	p.L2Bytes = int64(attr(AttrL2CacheSize))
	p.ClockMHz = attr(AttrClockRateKHz) / 1000
	p.MemClockMHz = attr(AttrMemoryClockRateKHz) / 1000
	p.MemBusBits = attr(AttrGlobalMemoryBusWidth)
	p.MaxSharedOptin = attr(AttrMaxSharedPerBlockOptn)
	p.MaxSharedPerBlock = attr(AttrMaxSharedPerBlock)
	p.MaxThreadsPerBlk = attr(AttrMaxThreadsPerBlock)
	p.MaxThreadsPerSM = attr(AttrMaxThreadsPerSM)
	p.AsyncEngines = attr(AttrAsyncEngineCount)
	p.MaxPersistingL2 = int64(attr(AttrMaxPersistingL2))
	p.MaxPolicyWindow = int64(attr(AttrMaxAccessPolicyWindow))
	p.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.0", attr(AttrPCIDomainID), attr(AttrPCIBusID), attr(AttrPCIDeviceID))
	var total uint64
	if err := checkf(drv.cuDeviceTotalMem(&total, c.dev), "cuDeviceTotalMem(%d)", ordinal); err != nil {
		return p, err
	}
	p.MemBytes = int64(total)
	p.DriverAPI, _ = DriverVersion()
	return p, nil
}

// Props returns the device's facts.
func (c *Context) Props() Props { return c.props }

var errClosed = errors.New("CUDA context is closed")

// Do runs fn on a thread where this context is current. The goroutine is
// locked to its OS thread for the duration, because the driver's current
// context is per thread and Go may otherwise move the goroutine between
// cuCtxSetCurrent and the call that relies on it. Use Do to call the driver
// (or a library on top of it) directly; this package's methods already do.
func (c *Context) Do(fn func() error) error {
	if c == nil || c.closed.Load() {
		return errClosed
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check(drv.cuCtxSetCurrent(c.ctx), "cuCtxSetCurrent"); err != nil {
		return err
	}
	return fn()
}

// Close releases the primary context. Everything allocated in it must be
// freed first; later calls return an error.
func (c *Context) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return checkf(drv.cuPrimaryCtxRelease(c.dev), "cuDevicePrimaryCtxRelease(%d)", c.props.Ordinal)
}

// Synchronize waits for all work in the context.
func (c *Context) Synchronize() error {
	return c.Do(func() error { return check(drv.cuCtxSynchronize(), "cuCtxSynchronize") })
}

// DevicePtr is a device address (CUdeviceptr).
type DevicePtr uint64

// Alloc returns n bytes of device memory.
func (c *Context) Alloc(n int64) (DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cuMemAlloc(%d): size must be positive", n)
	}
	var p uint64
	err := c.Do(func() error { return checkf(drv.cuMemAlloc(&p, uint64(n)), "cuMemAlloc(%d)", n) })
	return DevicePtr(p), err
}

// Free releases device memory from Alloc.
func (c *Context) Free(p DevicePtr) error {
	return c.Do(func() error { return checkf(drv.cuMemFree(uint64(p)), "cuMemFree(%#x)", uint64(p)) })
}

// MemInfo returns free and total device memory in bytes.
func (c *Context) MemInfo() (free, total int64, err error) {
	var f, t uint64
	err = c.Do(func() error { return check(drv.cuMemGetInfo(&f, &t), "cuMemGetInfo") })
	return int64(f), int64(t), err
}

// MemcpyHtoD copies src to device memory and returns when it is done.
func (c *Context) MemcpyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.Do(func() error {
		return checkf(drv.cuMemcpyHtoD(uint64(dst), unsafe.Pointer(&src[0]), uint64(len(src))), "cuMemcpyHtoD(%d)", len(src))
	})
}

// MemcpyDtoH copies len(dst) bytes from device memory and returns when done.
func (c *Context) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.Do(func() error {
		return checkf(drv.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), uint64(src), uint64(len(dst))), "cuMemcpyDtoH(%d)", len(dst))
	})
}

// MemcpyDtoD copies n bytes between device buffers.
func (c *Context) MemcpyDtoD(dst, src DevicePtr, n int64) error {
	if n == 0 {
		return nil
	}
	return c.Do(func() error {
		return checkf(drv.cuMemcpyDtoD(uint64(dst), uint64(src), uint64(n)), "cuMemcpyDtoD(%d)", n)
	})
}

// Memset sets n bytes of device memory to v.
func (c *Context) Memset(dst DevicePtr, v byte, n int64) error {
	if n == 0 {
		return nil
	}
	return c.Do(func() error { return checkf(drv.cuMemsetD8(uint64(dst), v, uint64(n)), "cuMemsetD8(%d)", n) })
}

// HostAlloc returns n bytes of page-locked host memory (cuMemHostAlloc with
// flags, e.g. HostAllocPortable). Release it with FreeHost.
func (c *Context) HostAlloc(n int64, flags uint32) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuMemHostAlloc(%d): size must be positive", n)
	}
	var p unsafe.Pointer
	err := c.Do(func() error {
		return checkf(drv.cuMemHostAlloc(&p, uint64(n), flags), "cuMemHostAlloc(%d)", n)
	})
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost releases memory from HostAlloc.
func (c *Context) FreeHost(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	return c.Do(func() error {
		return checkf(drv.cuMemFreeHost(unsafe.Pointer(&mem[0])), "cuMemFreeHost(%d bytes)", len(mem))
	})
}

// HostRegister page-locks existing host memory (cuMemHostRegister with
// flags, e.g. HostRegisterPortable). The memory must not be Go-heap memory
// the garbage collector may free while registered; mmapped memory is ideal.
func (c *Context) HostRegister(mem []byte, flags uint32) error {
	if len(mem) == 0 {
		return errors.New("cuMemHostRegister: empty range")
	}
	return c.Do(func() error {
		return checkf(drv.cuMemHostRegister(unsafe.Pointer(&mem[0]), uint64(len(mem)), flags), "cuMemHostRegister(%d bytes)", len(mem))
	})
}

// HostUnregister undoes HostRegister.
func (c *Context) HostUnregister(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	return c.Do(func() error {
		return checkf(drv.cuMemHostUnreg(unsafe.Pointer(&mem[0])), "cuMemHostUnregister(%d bytes)", len(mem))
	})
}

// DeviceBusID is device ordinal's PCI bus id ("0000:1b:00.0"), read
// without a context: a process that only hands GPUs to workers opens none.
func DeviceBusID(ordinal int) (string, error) {
	if err := loadDriver(); err != nil {
		return "", err
	}
	var d int32
	if err := checkf(drv.cuDeviceGet(&d, int32(ordinal)), "cuDeviceGet(%d)", ordinal); err != nil {
		return "", err
	}
	attr := func(a int32) int32 {
		var v int32
		drv.cuDeviceGetAttr(&v, a, d)
		return v
	}
	return fmt.Sprintf("%04x:%02x:%02x.0", attr(AttrPCIDomainID), attr(AttrPCIBusID), attr(AttrPCIDeviceID)), nil
}
