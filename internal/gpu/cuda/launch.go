package cuda

import (
	"fmt"
	"unsafe"
)

// launchEx says whether the driver has cuLaunchKernelEx; persistingL2
// whether it has cuCtxSetLimit and cuCtxResetPersistingL2Cache.
var launchEx, persistingL2 bool

// launchConfig is CUlaunchConfig (cuda.h, CUDA 12.0+), field for field.
type launchConfig struct {
	gridX, gridY, gridZ    uint32
	blockX, blockY, blockZ uint32
	sharedMemBytes         uint32
	_                      uint32
	stream                 uintptr
	attrs                  *launchAttr
	numAttrs               uint32
	_                      uint32
}

// launchAttr is CUlaunchAttribute: an id, padding to 8 bytes, and a
// 64-byte value union of which the attributes used here read the first int.
type launchAttr struct {
	id  uint32
	_   uint32
	val [64]byte
}

// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: the kernel may
// start before the previous kernel on its stream has finished; it waits for
// it with griddepcontrol.wait (programmatic dependent launch).
const attrProgrammaticStreamSerialization = 6

// ProgrammaticLaunch says whether this context can start a kernel before the
// previous kernel on its stream ends (programmatic dependent launch): the
// driver has cuLaunchKernelEx and the device is sm_90 or newer.
func (c *Context) ProgrammaticLaunch() bool { return launchEx && c.props.CCMajor >= 9 }

// LaunchProgrammatic is Launch with programmatic dependent launch where the
// context has it (else a plain Launch): the kernel's blocks may be scheduled
// while the stream's previous kernel is still running, so each must execute
// griddepcontrol.wait before it reads what that kernel writes or writes
// what any earlier kernel still reads. Stream capture keeps the relation as
// a programmatic edge of the graph.
func (f *Function) LaunchProgrammatic(s *Stream, grid, block Dim3, dynSmem int, args ...any) error {
	return f.LaunchWith(s, grid, block, dynSmem, LaunchOptions{Programmatic: true}, args...)
}

// CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: an L2 access policy for one
// address range during the launch (captured into a graph's kernel node).
const attrAccessPolicyWindow = 1

// CUaccessProperty values: a window's hits persist, its other lines are
// accessed as usual.
const (
	accessNormal     = 0
	accessPersisting = 2
)

// cuLimit CU_LIMIT_PERSISTING_L2_CACHE_SIZE.
const limitPersistingL2 = 6

// accessPolicyWindow is CUaccessPolicyWindow, field for field.
type accessPolicyWindow struct {
	base     uint64
	bytes    uint64
	hitRatio float32
	hitProp  uint32
	missProp uint32
	_        uint32
}

// PolicyWindow asks L2 to keep a range: HitRatio of its lines (chosen by
// address hash) are marked persisting, so they outlast streaming data in
// the set-aside part of L2; the rest are accessed normally.
type PolicyWindow struct {
	Base     DevicePtr
	Bytes    int64
	HitRatio float32 // 0 to 1
}

// LaunchOptions are Launch's optional attributes.
type LaunchOptions struct {
	Programmatic bool          // LaunchProgrammatic's programmatic dependent launch
	Window       *PolicyWindow // an L2 access policy window; nil: none
}

// PersistingL2 says whether this context can set aside L2 for persisting
// accesses and launch with access policy windows.
func (c *Context) PersistingL2() bool {
	return persistingL2 && launchEx && c.props.MaxPersistingL2 > 0 && c.props.MaxPolicyWindow > 0
}

// SetPersistingL2 sets aside bytes of L2 for persisting accesses (0 gives
// it back) and, either way, returns every persisting line to normal. The
// set-aside belongs to this process's context and ends with it; callers
// give it back when done so later work in the process sees the whole L2.
func (c *Context) SetPersistingL2(bytes int64) error {
	if !c.PersistingL2() {
		return fmt.Errorf("%s: no persisting L2 set-aside (driver or device)", c.props.Name)
	}
	if bytes < 0 || bytes > c.props.MaxPersistingL2 {
		return fmt.Errorf("persisting L2 set-aside of %d bytes: want 0 to %d", bytes, c.props.MaxPersistingL2)
	}
	// The reset first: if it fails, the set-aside is as it was; if the
	// limit then fails, only lines already persisting were made normal.
	return c.Do(func() error {
		if err := check(drv.cuCtxResetPersistingL2Cache(), "cuCtxResetPersistingL2Cache"); err != nil {
			return err
		}
		return checkf(drv.cuCtxSetLimit(limitPersistingL2, uint64(bytes)), "cuCtxSetLimit(persisting L2, %d)", bytes)
	})
}

// attrs encodes o as launch attributes.
func (o LaunchOptions) attrs() ([]launchAttr, error) {
	var out []launchAttr
	if o.Programmatic {
		a := launchAttr{id: attrProgrammaticStreamSerialization}
		a.val[0] = 1 // programmaticStreamSerializationAllowed (int, little-endian)
		out = append(out, a)
	}
	if w := o.Window; w != nil {
		if w.Bytes <= 0 || !(w.HitRatio >= 0 && w.HitRatio <= 1) { // NaN fails too
			return nil, fmt.Errorf("access policy window of %d bytes, hit ratio %g: want bytes > 0, ratio 0 to 1", w.Bytes, w.HitRatio)
		}
		a := launchAttr{id: attrAccessPolicyWindow}
		*(*accessPolicyWindow)(unsafe.Pointer(&a.val[0])) = accessPolicyWindow{base: uint64(w.Base), bytes: uint64(w.Bytes),
			hitRatio: w.HitRatio, hitProp: accessPersisting, missProp: accessNormal}
		out = append(out, a)
	}
	return out, nil
}
