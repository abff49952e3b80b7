package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// launchEx says whether the driver has cuLaunchKernelEx.
var launchEx bool

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
	if !f.c.ProgrammaticLaunch() {
		return f.Launch(s, grid, block, dynSmem, args...)
	}
	params, pin, err := marshalParams(args)
	if err != nil {
		return fmt.Errorf("launching %s: %w", f.name, err)
	}
	defer pin.Unpin()
	var cfg launchConfig
	cfg.gridX, cfg.gridY, cfg.gridZ = grid.dims()
	cfg.blockX, cfg.blockY, cfg.blockZ = block.dims()
	cfg.sharedMemBytes = uint32(dynSmem)
	cfg.stream = s.h
	attr := launchAttr{id: attrProgrammaticStreamSerialization}
	attr.val[0] = 1 // programmaticStreamSerializationAllowed (int, little-endian)
	cfg.attrs, cfg.numAttrs = &attr, 1
	// cfg holds a Go pointer and goes to C: pin what it points to.
	pin.Pin(&attr)
	var pp unsafe.Pointer
	if len(params) > 0 {
		pp = unsafe.Pointer(&params[0])
	}
	err = f.c.Do(func() error {
		return checkf(drv.cuLaunchKernelEx(&cfg, f.h, pp, nil),
			"cuLaunchKernelEx(%s, grid %dx%dx%d, block %dx%dx%d, smem %d, programmatic)",
			f.name, cfg.gridX, cfg.gridY, cfg.gridZ, cfg.blockX, cfg.blockY, cfg.blockZ, dynSmem)
	})
	runtime.KeepAlive(params)
	runtime.KeepAlive(&attr)
	return err
}
