package cuda

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"
)

// haveDriver reports whether this machine has a working CUDA device.
func haveDriver() bool {
	n, err := DeviceCount()
	return err == nil && n > 0
}

func TestNoDriverIsAnErrorNotACrash(t *testing.T) {
	if haveDriver() {
		t.Skip("this machine has a CUDA driver and device; the no-driver path cannot be seen here")
	}
	_, err := Open(0)
	if err == nil {
		t.Fatal("Open(0) succeeded without a usable driver")
	}
	msg := err.Error()
	t.Logf("Open(0): %s", msg)
	if loadDriver() != nil {
		// No libcuda at all: the message says what was searched.
		for _, want := range []string{"no CUDA driver", "libcuda.so.1", "not found", "searched", EnvDriver} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q lacks %q", msg, want)
			}
		}
	}
	// Every entry point keeps failing cleanly.
	if _, err := DeviceCount(); err == nil {
		t.Error("DeviceCount succeeded without a driver")
	}
	if _, err := DriverVersion(); err == nil {
		t.Error("DriverVersion succeeded without a driver")
	}
	var c *Context
	if err := c.Do(func() error { return nil }); err == nil {
		t.Error("Do on a nil context succeeded")
	}
}

func TestErrorFormat(t *testing.T) {
	err := error(&Error{Call: "cuMemAlloc(1073741824)", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"})
	if got, want := err.Error(), "cuMemAlloc(1073741824): CUDA_ERROR_OUT_OF_MEMORY"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrOutOfMemory) {
		t.Error("errors.Is(out-of-memory error, ErrOutOfMemory) = false")
	}
	if errors.Is(&Error{Call: "x", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE"}, ErrOutOfMemory) {
		t.Error("an invalid-value error matched ErrOutOfMemory")
	}
	if got := check(Success, "cuInit"); got != nil {
		t.Errorf("check(Success) = %v", got)
	}
}

func TestArchFor(t *testing.T) {
	tests := []struct {
		major, minor int
		want         string
	}{
		{9, 0, "sm_90a"}, // Hopper: H100, H200
		{10, 0, "sm_100a"},
		{8, 9, "sm_89"},
		{8, 0, "sm_80"},
		{7, 5, "sm_75"},
	}
	for _, tt := range tests {
		if got := ArchFor(tt.major, tt.minor); got != tt.want {
			t.Errorf("ArchFor(%d, %d) = %q, want %q", tt.major, tt.minor, got, tt.want)
		}
	}
}

func TestMarshalParams(t *testing.T) {
	type row struct {
		name string
		arg  any
		want []byte
	}
	f32 := math.Float32bits(1.5)
	tests := []row{
		{"device pointer", DevicePtr(0x1122334455667788), []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11}},
		{"int32 negative", int32(-2), []byte{0xfe, 0xff, 0xff, 0xff}},
		{"uint32", uint32(7), []byte{7, 0, 0, 0}},
		{"float32", float32(1.5), []byte{byte(f32), byte(f32 >> 8), byte(f32 >> 16), byte(f32 >> 24)}},
		{"int64", int64(-1), bytes.Repeat([]byte{0xff}, 8)},
		{"bf16 bits", uint16(0x3f80), []byte{0x80, 0x3f}},
		{"struct bytes", []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
	}
	args := make([]any, len(tests))
	for i, tt := range tests {
		args[i] = tt.arg
	}
	params, pin, err := marshalParams(args)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Unpin()
	if len(params) != len(tests) {
		t.Fatalf("%d params, want %d", len(params), len(tests))
	}
	for i, tt := range tests {
		got := unsafe.Slice((*byte)(params[i]), len(tt.want))
		if !bytes.Equal(got, tt.want) {
			t.Errorf("%s: param bytes = % x, want % x", tt.name, got, tt.want)
		}
		if uintptr(params[i])%8 != 0 {
			t.Errorf("%s: param not 8-byte aligned", tt.name)
		}
	}

	for _, bad := range []any{int(3), "str", []byte{}, struct{}{}} {
		if _, _, err := marshalParams([]any{bad}); err == nil {
			t.Errorf("marshalParams(%T) accepted an unsupported argument", bad)
		}
	}
	if p, _, err := marshalParams(nil); err != nil || p != nil {
		t.Errorf("no arguments: params %v, err %v; want nil, nil", p, err)
	}
}

func TestCompileErrorMessage(t *testing.T) {
	log := `k.cu(1): catastrophic error: cannot open source file "cuda_bf16.h"`
	e := &CompileError{Name: "k.cu", Err: &Error{Call: "nvrtcCompileProgram", Code: 6, Name: "NVRTC_ERROR_COMPILATION"}, Log: log,
		Hint: "the CUDA headers were not found (searched /usr/local/cuda/include); set MSTAR_CUDA_INCLUDE to the toolkit's include folder"}
	got := e.Error()
	for _, want := range []string{"compiling k.cu", "NVRTC_ERROR_COMPILATION", "searched /usr/local/cuda/include", EnvInclude, log} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if !mentionsCUDAHeader(log) || mentionsCUDAHeader("k.cu(3): error: identifier \"x\" is undefined") {
		t.Error("mentionsCUDAHeader misreads the log")
	}
	var ce *Error
	if !errors.As(e, &ce) || ce.Name != "NVRTC_ERROR_COMPILATION" {
		t.Error("CompileError does not unwrap to the NVRTC error")
	}
}
