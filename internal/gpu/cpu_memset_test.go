package gpu

import "testing"

// Memset on the CPU backend sets exactly [off, off+n) to v, at every length
// (the doubling copies' last step is partial) and leaves the rest alone.
func TestCPUMemsetSetsExactlyItsSpan(t *testing.T) {
	d := NewCPU()
	defer d.Close()
	const size = 5000
	b, err := d.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hb, err := hostBuf(b)
	if err != nil {
		t.Fatal(err)
	}
	data := hb.data
	for _, span := range [][2]int64{{0, 0}, {0, 1}, {3, 2}, {7, 1000}, {1, 4095}, {0, size}, {4999, 1}} {
		for i := range data {
			data[i] = 0x11
		}
		off, n := span[0], span[1]
		if err := s.Memset(b, off, n, 0xa5); err != nil {
			t.Fatal(err)
		}
		for i, v := range data {
			want := byte(0x11)
			if int64(i) >= off && int64(i) < off+n {
				want = 0xa5
			}
			if v != want {
				t.Fatalf("memset(off %d, n %d): byte %d is %#x, want %#x", off, n, i, v, want)
			}
		}
	}
	if err := s.Memset(b, size-1, 2, 0); err == nil {
		t.Error("a memset past the buffer's end was not refused")
	}
}
