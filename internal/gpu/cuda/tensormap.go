package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// tensorMaps: the driver has cuTensorMapEncodeTiled (CUDA 12.0+).
var tensorMaps bool

// TensorMap is a CUtensorMap: the 128 opaque bytes the tensor memory
// accelerator reads, passed to a kernel by value (a __grid_constant__
// parameter). Launch takes it as a []byte argument (Bytes).
type TensorMap [128]byte

// Bytes is the map as a kernel argument.
func (m *TensorMap) Bytes() []byte { return m[:] }

// TensorMap2D describes a row-major bf16 matrix of rows × inner elements
// at addr, read in boxes of boxRows × boxInner with the 128-byte swizzle
// (the layout wgmma reads from shared memory), boxes past the edges filled
// with zeros.
type TensorMap2D struct {
	Addr              DevicePtr
	Inner, Rows       uint64
	BoxInner, BoxRows uint32
}

// CU_TENSOR_MAP_* values of cuda.h.
const (
	tmBF16          = 9
	tmSwizzle128    = 3
	tmL2Promote256  = 3
	tmInterleaveNo  = 0
	tmOOBFillZeroes = 0
)

// Validate checks what cuTensorMapEncodeTiled would refuse, with a reason.
func (d TensorMap2D) Validate() error {
	switch {
	case d.Addr%16 != 0:
		return fmt.Errorf("tensor map: address %#x not 16-byte aligned", uint64(d.Addr))
	case d.Inner == 0 || d.Rows == 0 || d.Inner > 1<<32 || d.Rows > 1<<32:
		return fmt.Errorf("tensor map: %d×%d elements out of range", d.Rows, d.Inner)
	case (2*d.Inner)%16 != 0:
		return fmt.Errorf("tensor map: a row of %d bf16 is not a multiple of 16 bytes", d.Inner)
	case d.BoxInner == 0 || 2*d.BoxInner > 128 || (2*d.BoxInner)%16 != 0:
		return fmt.Errorf("tensor map: box rows of %d bf16: want 8–64 elements (the 128-byte swizzle's span), a multiple of 8", d.BoxInner)
	case d.BoxRows == 0 || d.BoxRows > 256:
		return fmt.Errorf("tensor map: %d box rows, want 1–256", d.BoxRows)
	}
	return nil
}

// EncodeTensorMap2D builds the map (a host-side call: nothing runs on the
// device).
func EncodeTensorMap2D(d TensorMap2D) (*TensorMap, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if err := loadDriver(); err != nil {
		return nil, err
	}
	if !tensorMaps {
		return nil, fmt.Errorf("tensor map: the CUDA driver has no cuTensorMapEncodeTiled (CUDA 12.0+ needed)")
	}
	// The map must be 64-byte aligned: carve it out of a larger buffer.
	// Everything C reads or writes is Go memory, pinned for the call.
	type callArgs struct {
		raw     [128 + 64]byte
		dims    [2]uint64
		strides [1]uint64
		box     [2]uint32
		elem    [2]uint32
	}
	a := &callArgs{dims: [2]uint64{d.Inner, d.Rows}, strides: [1]uint64{2 * d.Inner}, box: [2]uint32{d.BoxInner, d.BoxRows}, elem: [2]uint32{1, 1}}
	var pin runtime.Pinner
	pin.Pin(a)
	defer pin.Unpin()
	off := (64 - int(uintptr(unsafe.Pointer(&a.raw[0]))%64)) % 64
	r := drv.cuTensorMapEncodeTiled(unsafe.Pointer(&a.raw[off]), tmBF16, 2, uint64(d.Addr), unsafe.Pointer(&a.dims[0]), unsafe.Pointer(&a.strides[0]),
		unsafe.Pointer(&a.box[0]), unsafe.Pointer(&a.elem[0]), tmInterleaveNo, tmSwizzle128, tmL2Promote256, tmOOBFillZeroes)
	if err := checkf(r, "cuTensorMapEncodeTiled(%d×%d bf16, box %d×%d)", d.Rows, d.Inner, d.BoxRows, d.BoxInner); err != nil {
		return nil, err
	}
	var m TensorMap
	copy(m[:], a.raw[off:off+128])
	return &m, nil
}
