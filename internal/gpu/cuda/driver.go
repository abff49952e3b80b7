package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/mstar-dev/mstar/internal/sigstack"
)

// Result is a CUresult.
type Result int32

// Results the package acts on.
const (
	Success              Result = 0
	ErrorOutOfMemory     Result = 2
	ErrorNotInitialized  Result = 3
	ErrorNoDevice        Result = 100
	ErrorInvalidDevice   Result = 101
	ErrorNotReady        Result = 600
	ErrorHostMemRegister Result = 712 // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
	ErrorPeerEnabled     Result = 704 // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
	ErrorPeerNotEnabled  Result = 705 // CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
	ErrorNotSupported    Result = 801
)

// Error is a failed driver, NVRTC or cuBLAS call: the call, with its key
// arguments, and the library's name for the code, e.g.
// "cuMemAlloc(1073741824): CUDA_ERROR_OUT_OF_MEMORY".
type Error struct {
	Call string // "cuMemAlloc(1073741824)"
	Code int    // the library's numeric code
	Name string // "CUDA_ERROR_OUT_OF_MEMORY"
}

func (e *Error) Error() string { return e.Call + ": " + e.Name }

// Is makes errors.Is(err, &Error{Code: c}) match by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Name == "" || t.Name == e.Name)
}

// ErrOutOfMemory matches (errors.Is) a driver out-of-memory error.
var ErrOutOfMemory = &Error{Code: int(ErrorOutOfMemory), Name: "CUDA_ERROR_OUT_OF_MEMORY"}

// ErrNotSupported matches (errors.Is) a driver call the device or its
// configuration does not support.
var ErrNotSupported = &Error{Code: int(ErrorNotSupported), Name: "CUDA_ERROR_NOT_SUPPORTED"}

// Device attributes (CUdevice_attribute) that mstar reads.
const (
	AttrMaxThreadsPerBlock    = 1
	AttrMaxSharedPerBlock     = 8
	AttrClockRateKHz          = 13
	AttrMultiprocessorCount   = 16
	AttrPCIBusID              = 33
	AttrPCIDeviceID           = 34
	AttrMemoryClockRateKHz    = 36
	AttrGlobalMemoryBusWidth  = 37
	AttrL2CacheSize           = 38
	AttrMaxThreadsPerSM       = 39
	AttrAsyncEngineCount      = 40
	AttrPCIDomainID           = 50
	AttrComputeCapabilityMajr = 75
	AttrComputeCapabilityMinr = 76
	AttrMaxSharedPerBlockOptn = 97
	AttrMaxPersistingL2       = 108
	AttrMaxAccessPolicyWindow = 109
)

// Flags.
const (
	HostAllocPortable    = 0x01 // CU_MEMHOSTALLOC_PORTABLE
	HostAllocDeviceMap   = 0x02
	HostAllocWriteComb   = 0x04
	HostRegisterPortable = 0x01 // CU_MEMHOSTREGISTER_PORTABLE
	HostRegisterDevMap   = 0x02
	HostRegisterIOMemory = 0x04
	HostRegisterReadOnly = 0x08

	streamNonBlocking  = 0x1
	eventDefault       = 0x0
	eventDisableTiming = 0x2
	eventBlockingSync  = 0x1 // CU_EVENT_BLOCKING_SYNC: Synchronize sleeps instead of spinning
	waitValueGEQ       = 0x0 // CU_STREAM_WAIT_VALUE_GEQ: (int32)(*addr - v) >= 0, so wrap-around is harmless
	writeValueDefault  = 0x0 // CU_STREAM_WRITE_VALUE_DEFAULT: the write follows a system-wide fence

	funcAttrMaxDynamicShared = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	funcAttrNumRegs          = 4
	funcAttrLocalBytes       = 3 // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
)

// CaptureMode is a CUstreamCaptureMode.
type CaptureMode uint32

const (
	// CaptureGlobal forbids unsafe calls (synchronous copies, allocations)
	// from every thread while any capture is under way.
	CaptureGlobal CaptureMode = 0
	// CaptureThreadLocal forbids them on the capturing thread only. Go moves
	// goroutines between threads, so this rarely means what it says here.
	CaptureThreadLocal CaptureMode = 1
	// CaptureRelaxed forbids nothing; the right mode for Go callers that
	// only enqueue work on the captured stream.
	CaptureRelaxed CaptureMode = 2
)

// driverAPI holds the bound driver functions.
type driverAPI struct {
	cuGetErrorName      func(r Result, s **byte) Result
	cuInit              func(flags uint32) Result
	cuDriverGetVersion  func(v *int32) Result
	cuDeviceGetCount    func(n *int32) Result
	cuDeviceGet         func(d *int32, ordinal int32) Result
	cuDeviceGetName     func(name *byte, n int32, d int32) Result
	cuDeviceGetAttr     func(v *int32, attr int32, d int32) Result
	cuDeviceTotalMem    func(b *uint64, d int32) Result
	cuPrimaryCtxRetain  func(ctx *uintptr, d int32) Result
	cuPrimaryCtxRelease func(d int32) Result
	cuCtxSetCurrent     func(ctx uintptr) Result
	cuCtxSynchronize    func() Result

	cuMemAlloc        func(p *uint64, n uint64) Result
	cuMemFree         func(p uint64) Result
	cuMemGetInfo      func(free, total *uint64) Result
	cuMemsetD8        func(p uint64, v uint8, n uint64) Result
	cuMemsetD8Async   func(p uint64, v uint8, n uint64, s uintptr) Result
	cuMemcpyHtoD      func(dst uint64, src unsafe.Pointer, n uint64) Result
	cuMemcpyDtoH      func(dst unsafe.Pointer, src uint64, n uint64) Result
	cuMemcpyDtoD      func(dst, src uint64, n uint64) Result
	cuMemcpyHtoDAsync func(dst uint64, src unsafe.Pointer, n uint64, s uintptr) Result
	cuMemcpyDtoHAsync func(dst unsafe.Pointer, src uint64, n uint64, s uintptr) Result
	cuMemcpyDtoDAsync func(dst, src uint64, n uint64, s uintptr) Result
	cuMemHostAlloc    func(p *unsafe.Pointer, n uint64, flags uint32) Result
	cuMemFreeHost     func(p unsafe.Pointer) Result
	cuMemHostRegister func(p unsafe.Pointer, n uint64, flags uint32) Result
	cuMemHostUnreg    func(p unsafe.Pointer) Result

	cuStreamCreate    func(s *uintptr, flags uint32) Result
	cuStreamDestroy   func(s uintptr) Result
	cuStreamSync      func(s uintptr) Result
	cuStreamWaitEvent func(s, e uintptr, flags uint32) Result
	cuEventCreate     func(e *uintptr, flags uint32) Result
	cuEventDestroy    func(e uintptr) Result
	cuEventRecord     func(e, s uintptr) Result
	cuEventSync       func(e uintptr) Result
	cuEventQuery      func(e uintptr) Result
	cuEventElapsed    func(ms *float32, start, end uintptr) Result

	cuStreamBeginCapture func(s uintptr, mode uint32) Result
	cuStreamEndCapture   func(s uintptr, g *uintptr) Result
	cuGraphInstantiate   func(exec *uintptr, g uintptr, flags uint64) Result
	cuGraphLaunch        func(exec, s uintptr) Result
	cuGraphExecDestroy   func(exec uintptr) Result
	cuGraphDestroy       func(g uintptr) Result
	cuModuleLoadData     func(m *uintptr, image unsafe.Pointer) Result
	cuModuleUnload       func(m uintptr) Result
	cuModuleGetFunction  func(f *uintptr, m uintptr, name *byte) Result
	cuFuncSetAttribute   func(f uintptr, attr int32, v int32) Result
	cuFuncGetAttribute   func(v *int32, attr int32, f uintptr) Result
	cuOccupancyMaxBlocks func(n *int32, f uintptr, block int32, smem uint64) Result
	cuLaunchKernel       func(f uintptr, gx, gy, gz, bx, by, bz, smem uint32, s uintptr, params unsafe.Pointer, extra unsafe.Pointer) Result
	cuStreamIsCapturing  func(s uintptr, status *uint32) Result

	// Peer access (optional: nil when the driver lacks them).
	cuDeviceCanAccessPeer  func(can *int32, dev, peer int32) Result
	cuCtxEnablePeerAccess  func(peer uintptr, flags uint32) Result
	cuCtxDisablePeerAccess func(peer uintptr) Result
	cuMemcpyPeerAsync      func(dst uint64, dstCtx uintptr, src uint64, srcCtx uintptr, n uint64, s uintptr) Result

	// Stream memory operations (optional: nil when the driver lacks them).
	cuStreamWaitValue32  func(s uintptr, addr uint64, v uint32, flags uint32) Result
	cuStreamWriteValue32 func(s uintptr, addr uint64, v uint32, flags uint32) Result

	// The persisting L2 set-aside (optional: CUDA 11.0+ drivers).
	cuCtxSetLimit               func(limit int32, v uint64) Result
	cuCtxResetPersistingL2Cache func() Result

	// Launch with attributes (optional: CUDA 12.0+ drivers).
	cuLaunchKernelEx func(cfg *launchConfig, f uintptr, params unsafe.Pointer, extra unsafe.Pointer) Result

	// Tensor maps for the tensor memory accelerator (optional: CUDA 12.0+).
	cuTensorMapEncodeTiled func(tm unsafe.Pointer, dtype uint32, rank uint32, addr uint64, dims, strides unsafe.Pointer,
		box, elemStrides unsafe.Pointer, interleave, swizzle, l2promo, oobFill uint32) Result
}

var (
	drv        driverAPI
	driverOnce sync.Once
	driverLib  *library
	driverErr  error
	driverVer  int32
)

// loadDriver loads libcuda and calls cuInit, once per process.
func loadDriver() error {
	driverOnce.Do(func() {
		driverLib = loadLibrary(driverSpec, realEnv())
		if driverLib.err != nil {
			driverErr = fmt.Errorf("no CUDA driver: %w", driverLib.err)
			return
		}
		b := &binder{lib: "libcuda", h: driverLib.handle}
		d := &drv
		b.bind(&d.cuGetErrorName, "cuGetErrorName")
		b.bind(&d.cuInit, "cuInit")
		b.bind(&d.cuDriverGetVersion, "cuDriverGetVersion")
		b.bind(&d.cuDeviceGetCount, "cuDeviceGetCount")
		b.bind(&d.cuDeviceGet, "cuDeviceGet")
		b.bind(&d.cuDeviceGetName, "cuDeviceGetName")
		b.bind(&d.cuDeviceGetAttr, "cuDeviceGetAttribute")
		b.bind(&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2")
		b.bind(&d.cuPrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
		b.bind(&d.cuPrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")
		b.bind(&d.cuCtxSetCurrent, "cuCtxSetCurrent")
		b.bind(&d.cuCtxSynchronize, "cuCtxSynchronize")
		b.bind(&d.cuMemAlloc, "cuMemAlloc_v2")
		b.bind(&d.cuMemFree, "cuMemFree_v2")
		b.bind(&d.cuMemGetInfo, "cuMemGetInfo_v2")
		b.bind(&d.cuMemsetD8, "cuMemsetD8_v2")
		b.bind(&d.cuMemsetD8Async, "cuMemsetD8Async")
		b.bind(&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2")
		b.bind(&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2")
		b.bind(&d.cuMemcpyDtoD, "cuMemcpyDtoD_v2")
		b.bind(&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
		b.bind(&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
		b.bind(&d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")
		b.bind(&d.cuMemHostAlloc, "cuMemHostAlloc")
		b.bind(&d.cuMemFreeHost, "cuMemFreeHost")
		b.bind(&d.cuMemHostRegister, "cuMemHostRegister_v2")
		b.bind(&d.cuMemHostUnreg, "cuMemHostUnregister")
		b.bind(&d.cuStreamCreate, "cuStreamCreate")
		b.bind(&d.cuStreamDestroy, "cuStreamDestroy_v2")
		b.bind(&d.cuStreamSync, "cuStreamSynchronize")
		b.bind(&d.cuStreamWaitEvent, "cuStreamWaitEvent")
		b.bind(&d.cuEventCreate, "cuEventCreate")
		b.bind(&d.cuEventDestroy, "cuEventDestroy_v2")
		b.bind(&d.cuEventRecord, "cuEventRecord")
		b.bind(&d.cuEventSync, "cuEventSynchronize")
		b.bind(&d.cuEventQuery, "cuEventQuery")
		b.bind(&d.cuEventElapsed, "cuEventElapsedTime_v2", "cuEventElapsedTime")
		b.bind(&d.cuStreamBeginCapture, "cuStreamBeginCapture_v2")
		b.bind(&d.cuStreamEndCapture, "cuStreamEndCapture")
		b.bind(&d.cuGraphInstantiate, "cuGraphInstantiateWithFlags")
		b.bind(&d.cuGraphLaunch, "cuGraphLaunch")
		b.bind(&d.cuGraphExecDestroy, "cuGraphExecDestroy")
		b.bind(&d.cuGraphDestroy, "cuGraphDestroy")
		b.bind(&d.cuModuleLoadData, "cuModuleLoadData")
		b.bind(&d.cuModuleUnload, "cuModuleUnload")
		b.bind(&d.cuModuleGetFunction, "cuModuleGetFunction")
		b.bind(&d.cuFuncSetAttribute, "cuFuncSetAttribute")
		b.bind(&d.cuFuncGetAttribute, "cuFuncGetAttribute")
		b.bind(&d.cuOccupancyMaxBlocks, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
		b.bind(&d.cuLaunchKernel, "cuLaunchKernel")
		b.bind(&d.cuStreamIsCapturing, "cuStreamIsCapturing")
		if b.try(&d.cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer") && b.try(&d.cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess") &&
			b.try(&d.cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess") && b.try(&d.cuMemcpyPeerAsync, "cuMemcpyPeerAsync") {
			peerCalls = true
		}
		streamMemOps = b.try(&d.cuStreamWaitValue32, "cuStreamWaitValue32_v2") && b.try(&d.cuStreamWriteValue32, "cuStreamWriteValue32_v2")
		launchEx = b.try(&d.cuLaunchKernelEx, "cuLaunchKernelEx")
		persistingL2 = b.try(&d.cuCtxSetLimit, "cuCtxSetLimit") && b.try(&d.cuCtxResetPersistingL2Cache, "cuCtxResetPersistingL2Cache")
		tensorMaps = b.try(&d.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")
		if err := b.err(); err != nil {
			driverErr = fmt.Errorf("CUDA driver %s: %w", driverLib.comp.Path, err)
			return
		}
		err := check(drv.cuInit(0), "cuInit(0)")
		sigstack.Fix() // the driver installs handlers at cuInit
		if err != nil {
			driverErr = err
			return
		}
		if err := check(drv.cuDriverGetVersion(&driverVer), "cuDriverGetVersion"); err != nil {
			driverErr = err
		}
	})
	return driverErr
}

// check turns a CUresult into an error naming the call.
func check(r Result, call string) error {
	if r == Success {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: errorName(r)}
}

func errorName(r Result) string {
	if drv.cuGetErrorName != nil {
		var p *byte
		if drv.cuGetErrorName(r, &p) == Success && p != nil {
			return goString(p)
		}
	}
	return fmt.Sprintf("CUDA error %d", int(r))
}

// checkf is check with a formatted call.
func checkf(r Result, format string, a ...any) error {
	if r == Success {
		return nil
	}
	return check(r, fmt.Sprintf(format, a...))
}

// DriverVersion returns the CUDA driver API version, "13.0".
func DriverVersion() (string, error) {
	if err := loadDriver(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d.%d", driverVer/1000, driverVer%1000/10), nil
}

// DeviceCount returns how many CUDA devices the driver sees.
func DeviceCount() (int, error) {
	if err := loadDriver(); err != nil {
		return 0, err
	}
	var n int32
	if err := check(drv.cuDeviceGetCount(&n), "cuDeviceGetCount"); err != nil {
		return 0, err
	}
	return int(n), nil
}
