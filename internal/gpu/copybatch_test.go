package gpu

import (
	"encoding/binary"
	"testing"
)

// The launch parameter is the kernel's struct: src[64], dst[64], n[64].
func TestCopyBatchParamsLayout(t *testing.T) {
	b := copyBatchParams([][3]uint64{{1, 2, 3}, {4, 5, 6}})
	if len(b) != 3*8*CopyBatchMax {
		t.Fatalf("%d bytes", len(b))
	}
	at := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	if at(0) != 1 || at(1) != 4 || at(CopyBatchMax) != 2 || at(CopyBatchMax+1) != 5 || at(2*CopyBatchMax) != 3 || at(2*CopyBatchMax+1) != 6 || at(2) != 0 {
		t.Errorf("layout: src %d %d, dst %d %d, n %d %d", at(0), at(1), at(CopyBatchMax), at(CopyBatchMax+1), at(2*CopyBatchMax), at(2*CopyBatchMax+1))
	}
}

// The CPU backend's batch copies every range, and refuses one out of bounds.
func TestCopyDtoDBatchCPU(t *testing.T) {
	d := NewCPU()
	src, _ := d.Alloc(64)
	dst, _ := d.Alloc(64)
	for i := range src.(*HostBuffer).Bytes() {
		src.(*HostBuffer).Bytes()[i] = byte(i + 1)
	}
	s, _ := d.NewStream()
	bc, ok := s.(BatchCopier)
	if !ok {
		t.Fatal("the CPU stream is no BatchCopier")
	}
	if err := bc.CopyDtoDBatch([]DtoDCopy{{dst, 0, src, 32, 16}, {dst, 40, src, 0, 5}}); err != nil {
		t.Fatal(err)
	}
	got := dst.(*HostBuffer).Bytes()
	if got[0] != 33 || got[15] != 48 || got[16] != 0 || got[40] != 1 || got[44] != 5 || got[45] != 0 {
		t.Errorf("copied %v", got)
	}
	if err := bc.CopyDtoDBatch([]DtoDCopy{{dst, 60, src, 0, 16}}); err == nil {
		t.Error("a copy past the buffer's end was accepted")
	}
}
