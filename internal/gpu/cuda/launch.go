package cuda

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
	return f.launch(s, grid, block, dynSmem, f.c.ProgrammaticLaunch(), args)
}
