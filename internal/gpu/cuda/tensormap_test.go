package cuda

import (
	"strings"
	"testing"
)

// What cuTensorMapEncodeTiled would refuse is refused before the call,
// with the reason.
func TestTensorMap2DValidate(t *testing.T) {
	ok := TensorMap2D{Addr: 256, Inner: 4096, Rows: 28672, BoxInner: 64, BoxRows: 128}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid map refused: %v", err)
	}
	for _, tt := range []struct {
		name string
		edit func(*TensorMap2D)
		want string
	}{
		{"unaligned address", func(d *TensorMap2D) { d.Addr = 258 }, "16-byte aligned"},
		{"row pitch", func(d *TensorMap2D) { d.Inner = 4100 }, "multiple of 16 bytes"},
		{"box wider than the swizzle", func(d *TensorMap2D) { d.BoxInner = 128 }, "128-byte swizzle"},
		{"box rows", func(d *TensorMap2D) { d.BoxRows = 512 }, "box rows"},
		{"empty", func(d *TensorMap2D) { d.Rows = 0 }, "out of range"},
	} {
		d := ok
		tt.edit(&d)
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}

// On a GPU the driver encodes a valid map (the bytes are opaque: the test
// checks that they were written).
func TestEncodeTensorMap2D(t *testing.T) {
	c := openForTest(t)
	if c.Props().CCMajor < 9 {
		t.Skipf("tensor maps need sm_90 or newer; this GPU is %s", c.Props().Arch())
	}
	d, err := c.Alloc(2 * 256 * 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(d)
	m, err := EncodeTensorMap2D(TensorMap2D{Addr: d, Inner: 256, Rows: 1024, BoxInner: 64, BoxRows: 256})
	if err != nil {
		t.Fatal(err)
	}
	zero := true
	for _, b := range m {
		zero = zero && b == 0
	}
	if zero {
		t.Error("the driver left the tensor map all zeros")
	}
}
