package cuda

import (
	"math"
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

// CUaccessPolicyWindow as cuda.h lays it out, and its encoding into a launch
// attribute: a field out of place would give L2 the wrong range or ratio.
func TestAccessPolicyWindowAttr(t *testing.T) {
	var w accessPolicyWindow
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(CUaccessPolicyWindow)", unsafe.Sizeof(w), 32},
		{"offsetof(num_bytes)", unsafe.Offsetof(w.bytes), 8},
		{"offsetof(hitRatio)", unsafe.Offsetof(w.hitRatio), 16},
		{"offsetof(hitProp)", unsafe.Offsetof(w.hitProp), 20},
		{"offsetof(missProp)", unsafe.Offsetof(w.missProp), 24},
	} {
		if f.got != f.want {
			t.Errorf("%s = %d, cuda.h has %d", f.name, f.got, f.want)
		}
	}
	attrs, err := LaunchOptions{Programmatic: true, Window: &PolicyWindow{Base: 0x7f0000001000, Bytes: 58 << 20, HitRatio: 0.5}}.attrs()
	if err != nil || len(attrs) != 2 {
		t.Fatalf("attrs = %d, %v; want 2", len(attrs), err)
	}
	if attrs[0].id != attrProgrammaticStreamSerialization || attrs[0].val[0] != 1 {
		t.Errorf("first attribute %d (value %d), want programmatic serialization", attrs[0].id, attrs[0].val[0])
	}
	got := *(*accessPolicyWindow)(unsafe.Pointer(&attrs[1].val[0]))
	want := accessPolicyWindow{base: 0x7f0000001000, bytes: 58 << 20, hitRatio: 0.5, hitProp: accessPersisting, missProp: accessNormal}
	if attrs[1].id != attrAccessPolicyWindow || got != want {
		t.Errorf("window attribute %d %+v, want %d %+v", attrs[1].id, got, attrAccessPolicyWindow, want)
	}
	if a, err := (LaunchOptions{}).attrs(); err != nil || len(a) != 0 {
		t.Errorf("no options: %d attributes, %v", len(a), err)
	}
	for _, bad := range []PolicyWindow{{Base: 1, Bytes: 0, HitRatio: 1}, {Base: 1, Bytes: 8, HitRatio: 1.5}, {Base: 1, Bytes: 8, HitRatio: float32(math.NaN())}} {
		if _, err := (LaunchOptions{Window: &bad}).attrs(); err == nil {
			t.Errorf("window %+v: no error", bad)
		}
	}
}
