package gpu

import (
	"bytes"
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

// On CUDA the copy_batch kernel moves every byte of every copy — whole
// 16-byte units, tails, and an unaligned copy that takes the driver's path —
// and nothing else. Skips without a GPU.
func TestCopyDtoDBatchCUDA(t *testing.T) {
	if ok, why := cudaAvailable(); !ok {
		t.Skip("no CUDA device: " + why)
	}
	d, err := openCUDA(0)
	if err != nil {
		t.Skip(err)
	}
	defer d.Close()
	const n = 8 << 20
	src, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Free()
	dst, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	s, _ := d.NewStream()
	defer s.Close()
	host := make([]byte, n)
	for i := range host {
		host[i] = byte(i*7 + i>>13)
	}
	if err := s.CopyHtoD(src, 0, host); err != nil {
		t.Fatal(err)
	}
	if err := s.Memset(dst, 0, n, 0); err != nil {
		t.Fatal(err)
	}
	copies := []DtoDCopy{
		{dst, 0, src, 4 << 20, 1 << 20},        // aligned, whole units
		{dst, 1 << 20, src, 0, 1<<20 + 13},     // a 13-byte tail
		{dst, 3<<20 + 3, src, 5<<20 + 3, 4097}, // unaligned: the driver's copy
	}
	for i := 0; i < 70; i++ { // more than one launch's worth
		copies = append(copies, DtoDCopy{dst, 6<<20 + int64(i)*4096, src, int64(i) * 4096, 4000})
	}
	if err := s.(BatchCopier).CopyDtoDBatch(copies); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := s.CopyDtoH(got, dst, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, n)
	for _, c := range copies {
		copy(want[c.DstOff:c.DstOff+c.N], host[c.SrcOff:c.SrcOff+c.N])
	}
	if !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("byte %d: %d, want %d", i, got[i], want[i])
			}
		}
	}
}

func TestEvictBytes(t *testing.T) {
	for _, tc := range []struct{ l2, want int64 }{{50 << 20, 100 << 20}, {0, 16 << 20}, {3<<20 + 5, 16 << 20}, {9<<20 + 7, 18 << 20}} {
		if got := evictBytes(tc.l2); got != tc.want || got%16 != 0 {
			t.Errorf("evictBytes(%d) = %d, want %d", tc.l2, got, tc.want)
		}
	}
}

// On CUDA EvictCache runs (compiles, allocates its scratch, launches) and
// leaves device memory as it was. Skips without a GPU.
func TestEvictCacheCUDA(t *testing.T) {
	if ok, why := cudaAvailable(); !ok {
		t.Skip("no CUDA device: " + why)
	}
	d, err := openCUDA(0)
	if err != nil {
		t.Skip(err)
	}
	defer d.Close()
	b, err := d.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	s, _ := d.NewStream()
	defer s.Close()
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 13)
	}
	if err := s.CopyHtoD(b, 0, want); err != nil {
		t.Fatal(err)
	}
	ev, ok := s.(CacheEvicter)
	if !ok {
		t.Fatal("the CUDA stream is no CacheEvicter")
	}
	for range 2 {
		if err := ev.EvictCache(); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, len(want))
	if err := s.CopyDtoH(got, b, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("device memory changed across EvictCache")
	}
}
