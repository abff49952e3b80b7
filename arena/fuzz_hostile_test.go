package arena

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// FuzzHostileDescriptor sends any descriptor — sizes and offsets up to
// 2^63, any location, dtype and shape — to a Reader that has a real
// segment and a real spill file. Nothing may panic or allocate the claimed
// size, and a read succeeds only for a range inside the real file.
func FuzzHostileDescriptor(f *testing.F) {
	f.Add(uint8(InSegment), int64(0), int64(4096), "uint8", uint8(0))
	f.Add(uint8(InSegment), int64(0), int64(1)<<40, "uint8", uint8(0))
	f.Add(uint8(InFile), int64(0), int64(1)<<62, "uint8", uint8(0))
	f.Add(uint8(InSegment), int64(1)<<62, int64(1)<<62, "float32", uint8(2))
	f.Add(uint8(InFile), int64(0), int64(-1), "bfloat16", uint8(1))
	a := newTestArena(f, Config{SegmentSize: 1 << 20})
	seg, err := a.Put(context.Background(), pattern(4096, 1), Meta{}, 1)
	if err != nil {
		f.Fatal(err)
	}
	spill := a.spillSlot(4096, true, true)
	file, err := a.Publish(spill, Meta{}, 1)
	if err != nil {
		f.Fatal(err)
	}
	r := NewReader(ReaderConfig{Dir: a.Config().Dir})
	f.Cleanup(func() { r.Close() })
	dev := gpu.NewCPU()
	s, _ := dev.NewStream()
	buf, _ := dev.Alloc(1 << 20)
	dst := make([]byte, 1<<20)
	f.Fuzz(func(t *testing.T, loc uint8, off, size int64, dtype string, dims uint8) {
		d := seg
		if Location(loc) == InFile {
			d = file
		}
		d.Loc, d.Offset, d.Size, d.DType, d.HasChecksum = Location(loc), off, size, dtype, false
		d.Shape = nil
		for i := 0; i < int(dims%4); i++ {
			d.Shape = append(d.Shape, size>>(8*i))
		}
		inside := off >= 0 && size >= 0 && off <= 1<<20 && size <= (1<<20)-off
		if err := r.CheckSize(d); err == nil && !inside {
			t.Fatalf("CheckSize accepted [%d, +%d) of a 1 MiB segment", off, size)
		}
		if size <= int64(len(dst)) && size >= 0 {
			_ = r.ReadInto(d, dst)
		}
		if release, err := r.CopyToDevice(s, buf, 0, d); err == nil {
			release()
		}
	})
}

// FuzzFrameHeader feeds raw bytes to the frame reader, hello frames
// included: a length past the limit is refused before anything is
// allocated, and nothing panics.
func FuzzFrameHeader(f *testing.F) {
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add(binary.LittleEndian.AppendUint32(nil, maxHello+1))
	f.Add(append(binary.LittleEndian.AppendUint32(nil, 5), frameHello, 1, 2, 3, 4))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, limit := range []uint32{maxHello, maxFrame} {
			l := &Link{br: bufio.NewReader(bytes.NewReader(data))}
			_, p, err := l.readFrameMax(limit)
			if err == nil && uint32(len(p)+1) > limit {
				t.Fatalf("frame of %d bytes accepted under a limit of %d", len(p)+1, limit)
			}
		}
		l := &Link{br: bufio.NewReader(bytes.NewReader(data))}
		_, _, _ = l.recv()
	})
}
