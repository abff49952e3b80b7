package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// cuBLAS data and compute types used by GemmEx.
const (
	DataF32  = 0  // CUDA_R_32F
	DataF16  = 2  // CUDA_R_16F
	DataBF16 = 14 // CUDA_R_16BF

	Compute32F = 68 // CUBLAS_COMPUTE_32F

	OpN = 0 // CUBLAS_OP_N
	OpT = 1 // CUBLAS_OP_T

	gemmDefault = -1 // CUBLAS_GEMM_DEFAULT
)

type cublasAPI struct {
	create    func(h *uintptr) int32
	destroy   func(h uintptr) int32
	setStream func(h, s uintptr) int32
	getProp   func(prop int32, v *int32) int32
	setWS     func(h uintptr, ws uint64, size uint64) int32
	gemmEx    func(h uintptr, ta, tb int32, m, n, k int32, alpha unsafe.Pointer, a uint64, at int32, lda int32,
		b uint64, bt int32, ldb int32, beta unsafe.Pointer, c uint64, ct int32, ldc int32, compute int32, algo int32) int32
}

var (
	cublasOnce sync.Once
	cublas     cublasAPI
	cublasErr  error
	cublasComp Component
)

func loadCUBLAS() error {
	cublasOnce.Do(func() {
		l := loadLibrary(cublasSpec, realEnv())
		cublasComp = l.comp
		if l.err != nil {
			cublasErr = fmt.Errorf("no cuBLAS: %v", l.err)
			return
		}
		b := &binder{lib: "cuBLAS", h: l.handle}
		b.bind(&cublas.create, "cublasCreate_v2")
		b.bind(&cublas.destroy, "cublasDestroy_v2")
		b.bind(&cublas.setStream, "cublasSetStream_v2")
		b.bind(&cublas.gemmEx, "cublasGemmEx")
		b.try(&cublas.getProp, "cublasGetProperty")
		b.try(&cublas.setWS, "cublasSetWorkspace_v2")
		if err := b.err(); err != nil {
			cublasErr = fmt.Errorf("cuBLAS %s: %w", l.comp.Path, err)
			cublasComp.Err = cublasErr.Error()
			return
		}
		if cublas.getProp != nil {
			var maj, min int32
			if cublas.getProp(0, &maj) == 0 && cublas.getProp(1, &min) == 0 {
				cublasComp.Version = fmt.Sprintf("%d.%d", maj, min)
			}
		}
	})
	return cublasErr
}

// cublasStatusNames are cublasStatus_t's names.
var cublasStatusNames = map[int32]string{
	1:  "CUBLAS_STATUS_NOT_INITIALIZED",
	3:  "CUBLAS_STATUS_ALLOC_FAILED",
	7:  "CUBLAS_STATUS_INVALID_VALUE",
	8:  "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func cublasCheck(r int32, call string) error {
	if r == 0 {
		return nil
	}
	name, ok := cublasStatusNames[r]
	if !ok {
		name = fmt.Sprintf("cuBLAS status %d", r)
	}
	return &Error{Call: call, Code: int(r), Name: name}
}

// BLAS is a cuBLAS handle bound to a context.
type BLAS struct {
	c *Context
	h uintptr
}

// NewBLAS loads cuBLAS (see Discover) and creates a handle.
func (c *Context) NewBLAS() (*BLAS, error) {
	if err := loadCUBLAS(); err != nil {
		return nil, err
	}
	b := &BLAS{c: c}
	if err := c.Do(func() error { return cublasCheck(cublas.create(&b.h), "cublasCreate") }); err != nil {
		return nil, err
	}
	return b, nil
}

// Destroy releases the handle.
func (b *BLAS) Destroy() error {
	return b.c.Do(func() error { return cublasCheck(cublas.destroy(b.h), "cublasDestroy") })
}

// SetStream makes later calls run on s.
func (b *BLAS) SetStream(s *Stream) error {
	return b.c.Do(func() error { return cublasCheck(cublas.setStream(b.h, s.h), "cublasSetStream") })
}

// SetWorkspace gives cuBLAS a workspace of its own (cublasSetWorkspace);
// larger ones let it pick faster kernels on Hopper.
func (b *BLAS) SetWorkspace(ws DevicePtr, size int64) error {
	if cublas.setWS == nil {
		return fmt.Errorf("cublasSetWorkspace: not in this cuBLAS")
	}
	return b.c.Do(func() error { return cublasCheck(cublas.setWS(b.h, uint64(ws), uint64(size)), "cublasSetWorkspace") })
}

// GemmEx computes C = alpha·op(A)·op(B) + beta·C in cuBLAS's column-major
// convention, with the data types given (DataBF16, ...) and fp32 compute
// and scalars (Compute32F).
func (b *BLAS) GemmEx(transA, transB int, m, n, k int, alpha float32, a DevicePtr, aType, lda int,
	bm DevicePtr, bType, ldb int, beta float32, cm DevicePtr, cType, ldc int) error {
	al, be := alpha, beta
	return b.c.Do(func() error {
		return cublasCheck(cublas.gemmEx(b.h, int32(transA), int32(transB), int32(m), int32(n), int32(k),
			unsafe.Pointer(&al), uint64(a), int32(aType), int32(lda), uint64(bm), int32(bType), int32(ldb),
			unsafe.Pointer(&be), uint64(cm), int32(cType), int32(ldc), Compute32F, gemmDefault),
			fmt.Sprintf("cublasGemmEx(m=%d n=%d k=%d)", m, n, k))
	})
}
