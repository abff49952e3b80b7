package cuda

import (
	"testing"
	"unsafe"
)

// The driver reads these structs by cuda.h's layout (x86-64 and arm64 alike):
// a field out of place would launch with a garbage stream or attribute.
func TestLaunchConfigLayout(t *testing.T) {
	var c launchConfig
	var a launchAttr
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(CUlaunchConfig)", unsafe.Sizeof(c), 56},
		{"offsetof(sharedMemBytes)", unsafe.Offsetof(c.sharedMemBytes), 24},
		{"offsetof(hStream)", unsafe.Offsetof(c.stream), 32},
		{"offsetof(attrs)", unsafe.Offsetof(c.attrs), 40},
		{"offsetof(numAttrs)", unsafe.Offsetof(c.numAttrs), 48},
		{"sizeof(CUlaunchAttribute)", unsafe.Sizeof(a), 72},
		{"offsetof(value)", unsafe.Offsetof(a.val), 8},
	} {
		if f.got != f.want {
			t.Errorf("%s = %d, cuda.h has %d", f.name, f.got, f.want)
		}
	}
}
