package cuda

import (
	"bytes"
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Module is loaded device code (CUBIN or PTX).
type Module struct {
	c *Context
	h uintptr
}

// LoadModule loads a CUBIN (ELF) or PTX image into the context.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cuModuleLoadData: empty image")
	}
	// PTX is handed over as a C string.
	if !bytes.HasPrefix(image, []byte("\x7fELF")) && image[len(image)-1] != 0 {
		image = append(image[:len(image):len(image)], 0)
	}
	m := &Module{c: c}
	err := c.Do(func() error {
		return checkf(drv.cuModuleLoadData(&m.h, unsafe.Pointer(&image[0])), "cuModuleLoadData(%d bytes)", len(image))
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Unload releases the module.
func (m *Module) Unload() error {
	return m.c.Do(func() error { return check(drv.cuModuleUnload(m.h), "cuModuleUnload") })
}

// Function looks up a kernel by its (extern "C" or mangled) name.
func (m *Module) Function(name string) (*Function, error) {
	f := &Function{c: m.c, name: name}
	cname := cString(name)
	err := m.c.Do(func() error {
		return checkf(drv.cuModuleGetFunction(&f.h, m.h, &cname[0]), "cuModuleGetFunction(%q)", name)
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Function is a kernel.
type Function struct {
	c    *Context
	h    uintptr
	name string
}

// Name is the kernel's name.
func (f *Function) Name() string { return f.name }

// Handle is the raw CUfunction.
func (f *Function) Handle() uintptr { return f.h }

// SetMaxDynamicSharedMemory lets launches use up to n bytes of dynamic
// shared memory (above 48 KiB a kernel must opt in).
func (f *Function) SetMaxDynamicSharedMemory(n int) error {
	return f.c.Do(func() error {
		return checkf(drv.cuFuncSetAttribute(f.h, funcAttrMaxDynamicShared, int32(n)), "cuFuncSetAttribute(%s, MAX_DYNAMIC_SHARED_SIZE_BYTES, %d)", f.name, n)
	})
}

// NumRegs returns the registers each thread of the kernel uses.
func (f *Function) NumRegs() (int, error) {
	var v int32
	err := f.c.Do(func() error {
		return checkf(drv.cuFuncGetAttribute(&v, funcAttrNumRegs, f.h), "cuFuncGetAttribute(%s, NUM_REGS)", f.name)
	})
	return int(v), err
}

// LocalBytes returns the local memory each thread of the kernel uses: its
// stack frame and register spills (0 for a kernel that fits its registers).
func (f *Function) LocalBytes() (int, error) {
	var v int32
	err := f.c.Do(func() error {
		return checkf(drv.cuFuncGetAttribute(&v, funcAttrLocalBytes, f.h), "cuFuncGetAttribute(%s, LOCAL_SIZE_BYTES)", f.name)
	})
	return int(v), err
}

// MaxActiveBlocksPerSM is the occupancy of the kernel at this block size
// and dynamic shared memory.
func (f *Function) MaxActiveBlocksPerSM(blockThreads, dynSmem int) (int, error) {
	var v int32
	err := f.c.Do(func() error {
		return checkf(drv.cuOccupancyMaxBlocks(&v, f.h, int32(blockThreads), uint64(dynSmem)), "cuOccupancyMaxActiveBlocksPerMultiprocessor(%s, %d, %d)", f.name, blockThreads, dynSmem)
	})
	return int(v), err
}

// Dim3 is a grid or block size; zero fields count as 1.
type Dim3 struct{ X, Y, Z int }

func (d Dim3) dims() (x, y, z uint32) {
	one := func(v int) uint32 {
		if v <= 0 {
			return 1
		}
		return uint32(v)
	}
	return one(d.X), one(d.Y), one(d.Z)
}

// Launch queues the kernel on s. Each argument is passed by value as the
// kernel declares it: DevicePtr (any T*), int32, uint32, int64, uint64,
// float32, float64, uint16 (a bf16 or half's bits), or []byte for a
// by-value struct laid out by the caller. Go's int is refused: its C width
// is ambiguous.
func (f *Function) Launch(s *Stream, grid, block Dim3, dynSmem int, args ...any) error {
	return f.launch(s, grid, block, dynSmem, LaunchOptions{}, args)
}

// LaunchWith is Launch with attributes: programmatic dependent launch (as
// LaunchProgrammatic: only where the context has it) and an L2 access policy
// window (an error where the context has none: PersistingL2).
func (f *Function) LaunchWith(s *Stream, grid, block Dim3, dynSmem int, o LaunchOptions, args ...any) error {
	o.Programmatic = o.Programmatic && f.c.ProgrammaticLaunch()
	if o.Window != nil && !f.c.PersistingL2() {
		return fmt.Errorf("launching %s with an L2 access policy window: %s has none", f.name, f.c.props.Name)
	}
	return f.launch(s, grid, block, dynSmem, o, args)
}

// launch is Launch, through cuLaunchKernelEx when o has attributes.
func (f *Function) launch(s *Stream, grid, block Dim3, dynSmem int, o LaunchOptions, args []any) error {
	attrs, err := o.attrs()
	if err != nil {
		return fmt.Errorf("launching %s: %w", f.name, err)
	}
	params, pin, err := marshalParams(args)
	if err != nil {
		return fmt.Errorf("launching %s: %w", f.name, err)
	}
	defer pin.Unpin()
	gx, gy, gz := grid.dims()
	bx, by, bz := block.dims()
	var pp unsafe.Pointer
	if len(params) > 0 {
		pp = unsafe.Pointer(&params[0])
	}
	call, mode := "cuLaunchKernel", ""
	launch := func() Result { return drv.cuLaunchKernel(f.h, gx, gy, gz, bx, by, bz, uint32(dynSmem), s.h, pp, nil) }
	if len(attrs) > 0 {
		pin.Pin(&attrs[0]) // cfg holds this Go pointer and goes to C
		cfg := &launchConfig{gridX: gx, gridY: gy, gridZ: gz, blockX: bx, blockY: by, blockZ: bz,
			sharedMemBytes: uint32(dynSmem), stream: s.h, attrs: &attrs[0], numAttrs: uint32(len(attrs))}
		call = "cuLaunchKernelEx"
		if o.Programmatic {
			mode += ", programmatic"
		}
		if o.Window != nil {
			mode += fmt.Sprintf(", L2 window %d bytes at ratio %g", o.Window.Bytes, o.Window.HitRatio)
		}
		launch = func() Result { return drv.cuLaunchKernelEx(cfg, f.h, pp, nil) }
	}
	err = f.c.Do(func() error {
		return checkf(launch(), "%s(%s, grid %dx%dx%d, block %dx%dx%d, smem %d%s)", call, f.name, gx, gy, gz, bx, by, bz, dynSmem, mode)
	})
	runtime.KeepAlive(params)
	return err
}

// marshalParams lays the arguments out as cuLaunchKernel's kernelParams: an
// array of pointers, each to one argument's value. The values live in one
// Go allocation; both it and the pointer array are pinned (runtime.Pinner)
// for the call, since C receives Go memory holding Go pointers. The driver
// copies the values during the call, so nothing must outlive it.
func marshalParams(args []any) ([]unsafe.Pointer, *runtime.Pinner, error) {
	pin := new(runtime.Pinner)
	if len(args) == 0 {
		return nil, pin, nil
	}
	// Sizes first, each slot rounded up to 8 bytes.
	size := 0
	for i, a := range args {
		n, err := paramSize(a)
		if err != nil {
			return nil, pin, fmt.Errorf("argument %d: %w", i, err)
		}
		size += (n + 7) &^ 7
	}
	store := make([]uint64, size/8)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&store[0])), size)
	params := make([]unsafe.Pointer, len(args))
	pin.Pin(&store[0])
	pin.Pin(&params[0])
	off := 0
	for i, a := range args {
		n, _ := paramSize(a)
		slot := buf[off : off+n]
		putParam(slot, a)
		params[i] = unsafe.Pointer(&buf[off])
		off += (n + 7) &^ 7
	}
	return params, pin, nil
}

func paramSize(a any) (int, error) {
	switch v := a.(type) {
	case DevicePtr, int64, uint64, float64, uintptr:
		return 8, nil
	case int32, uint32, float32:
		return 4, nil
	case uint16, int16:
		return 2, nil
	case uint8, int8:
		return 1, nil
	case []byte:
		if len(v) == 0 {
			return 0, fmt.Errorf("empty []byte argument")
		}
		return len(v), nil
	case int:
		return 0, fmt.Errorf("Go int is ambiguous as a kernel argument: use int32 or int64")
	default:
		return 0, fmt.Errorf("unsupported kernel argument type %T", a)
	}
}

func putParam(dst []byte, a any) {
	le := func(v uint64, n int) {
		for i := 0; i < n; i++ {
			dst[i] = byte(v >> (8 * i))
		}
	}
	switch v := a.(type) {
	case DevicePtr:
		le(uint64(v), 8)
	case uintptr:
		le(uint64(v), 8)
	case int64:
		le(uint64(v), 8)
	case uint64:
		le(v, 8)
	case float64:
		le(math.Float64bits(v), 8)
	case int32:
		le(uint64(uint32(v)), 4)
	case uint32:
		le(uint64(v), 4)
	case float32:
		le(uint64(math.Float32bits(v)), 4)
	case uint16:
		le(uint64(v), 2)
	case int16:
		le(uint64(uint16(v)), 2)
	case uint8:
		dst[0] = v
	case int8:
		dst[0] = byte(v)
	case []byte:
		copy(dst, v)
	}
}
