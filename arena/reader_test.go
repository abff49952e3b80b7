package arena

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Hostile descriptors are refused with a clear error before any memory of
// a segment is touched.
func TestHostileDescriptors(t *testing.T) {
	a := newTestArena(t, Config{SegmentSize: 1 << 20})
	dir := a.Config().Dir
	good, err := a.Put(context.Background(), pattern(1000, 1), Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	segName := good.File
	// A segment-looking file owned by someone else.
	foreign := Name{Kind: KindSegment, Entity: "other", PID: 1, Token: "00000000000000aa"}.String()
	if err := os.WriteFile(filepath.Join(dir, foreign), make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	otherUID := os.Getuid() + 1
	if os.Getuid() == 0 {
		if err := os.Chown(filepath.Join(dir, foreign), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		otherUID = 0 // the reader expects root; the file is nobody's
	}
	// A symlink with a valid name pointing at /etc/passwd.
	link := Name{Kind: KindSegment, Entity: "evil", PID: 1, Token: "00000000000000bb"}.String()
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, link)); err != nil {
		t.Fatal(err)
	}
	// A FIFO with a valid name (opening it for reading must not hang).
	fifo := Name{Kind: KindSpill, Entity: "evil", PID: 1, Token: "00000000000000cc"}.String()
	if err := unix.Mkfifo(filepath.Join(dir, fifo), 0o600); err != nil {
		t.Fatal(err)
	}
	mod := func(f func(*Descriptor)) Descriptor {
		d := good
		f(&d)
		return d
	}
	tests := []struct {
		name string
		d    Descriptor
		uid  *int
		want string
	}{
		{"path traversal", mod(func(d *Descriptor) { d.File = "../etc/passwd" }), nil, "path separator"},
		{"absolute path", mod(func(d *Descriptor) { d.File = "/etc/passwd" }), nil, "path separator"},
		{"not an arena name", mod(func(d *Descriptor) { d.File = "passwd" }), nil, "does not start with mstar_"},
		{"offset past the segment end", mod(func(d *Descriptor) { d.Offset = 1 << 20 }), nil, "past the end of segment"},
		{"range straddling the end", mod(func(d *Descriptor) { d.Offset = 1<<20 - 10 }), nil, "past the end of segment"},
		{"negative offset", mod(func(d *Descriptor) { d.Offset = -64 }), nil, "negative offset"},
		{"overflowing range", mod(func(d *Descriptor) { d.Offset = 1<<63 - 10; d.Size = 1000 }), nil, "overflows"},
		{"segment of another user", mod(func(d *Descriptor) { d.File = foreign }), &otherUID, "owned by uid"},
		{"symlink", mod(func(d *Descriptor) { d.File = link }), nil, "symbolic link"},
		{"fifo", mod(func(d *Descriptor) { d.Loc = InFile; d.File = fifo; d.Offset = 0 }), nil, "not a regular file"},
		{"segment name as a file", mod(func(d *Descriptor) { d.Loc = InFile; d.Offset = 0 }), nil, "names a segment"},
		{"unknown location", mod(func(d *Descriptor) { d.Loc = 9 }), nil, "unknown location"},
		{"unknown dtype", mod(func(d *Descriptor) { d.DType = "float128" }), nil, "unknown dtype"},
		{"shape does not match size", mod(func(d *Descriptor) { d.DType = "float32"; d.Shape = []int64{10, 10} }), nil, "but size is 1000"},
		{"missing segment", mod(func(d *Descriptor) { d.File = Name{KindSegment, "gone", 5, "0000000000000000"}.String() }), nil, "no such file"},
	}
	for _, tc := range tests {
		cfg := ReaderConfig{Dir: dir}
		if tc.uid != nil {
			cfg.UID = tc.uid
		}
		r := NewReader(cfg)
		dst := bytes.Repeat([]byte{0xAB}, 4096)
		err := r.ReadInto(tc.d, dst)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if !bytes.Equal(dst, bytes.Repeat([]byte{0xAB}, 4096)) {
			t.Errorf("%s: the destination was written although the descriptor was refused", tc.name)
		}
		if st := r.Stats(); tc.name != "offset past the segment end" && tc.name != "range straddling the end" && st.Mapped != 0 {
			t.Errorf("%s: %d segments mapped for a refused descriptor", tc.name, st.Mapped)
		}
		if st := r.Stats(); st.InFlight != 0 {
			t.Errorf("%s: %d views left in flight", tc.name, st.InFlight)
		}
		_ = r.Close()
	}
	_ = segName
}

func TestTransportMismatchDescriptor(t *testing.T) {
	a := newTestArena(t, Config{})
	d, _ := a.Put(context.Background(), pattern(100, 1), Meta{}, 1)
	r := NewReader(ReaderConfig{Dir: a.Config().Dir, Transport: TransportFile})
	err := r.ReadInto(d, make([]byte, 100))
	if err == nil || !strings.Contains(err.Error(), "transport mismatch") || !strings.Contains(err.Error(), "--transport") {
		t.Fatalf("arena descriptor at a file consumer: %v, want a transport mismatch naming the setting", err)
	}
}

func TestReaderCachesAndEvicts(t *testing.T) {
	a := newTestArena(t, Config{})
	dir := a.Config().Dir
	r := NewReader(ReaderConfig{Dir: dir})
	defer r.Close()
	var ds []Descriptor
	for i := range 5 {
		d, err := a.Put(context.Background(), pattern(1000, byte(i)), Meta{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
		if err := r.ReadInto(d, make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.Stats(); st.Mapped != 1 {
		t.Fatalf("5 tensors from one segment: %d mappings, want the one cached", st.Mapped)
	}
	// A view in flight keeps the mapping even after the producer is gone.
	mem, release, err := r.View(ds[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := r.Evict(); n != 0 {
		t.Fatalf("evicted %d mappings with a copy in flight", n)
	}
	if !bytes.Equal(mem, pattern(1000, 0)) {
		t.Fatal("an in-flight view changed after the producer closed")
	}
	release()
	release() // idempotent
	if n := r.Evict(); n != 1 {
		t.Fatalf("evicted %d mappings after the file went and the copy finished, want 1", n)
	}
	if st := r.Stats(); st.Mapped != 0 || st.InFlight != 0 {
		t.Fatalf("after eviction: %+v", st)
	}
}

func TestForgetOwnerReleasesLock(t *testing.T) {
	a := newTestArena(t, Config{})
	dir := a.Config().Dir
	r := NewReader(ReaderConfig{Dir: dir})
	defer r.Close()
	d, _ := a.Put(context.Background(), pattern(100, 1), Meta{}, 1)
	if err := r.ReadInto(d, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	// Simulate a killed producer: its lock goes away but the file stays.
	seg := a.segs[0]
	_ = unix.Munmap(seg.file.mem)
	seg.file.mem = nil
	_ = unix.Close(seg.file.fd)
	seg.file.fd = -1
	untrack(seg.file.path)
	a.segs = nil
	rep, err := CleanOrphans(dir, CleanOptions{Grace: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.InUse) != 1 || len(rep.Removed) != 0 {
		t.Fatalf("sweep while a consumer still maps the dead producer's segment: %s", rep)
	}
	r.ForgetOwner("test", os.Getpid())
	if st := r.Stats(); st.Mapped != 0 {
		t.Fatalf("mapping kept after its owner was forgotten: %+v", st)
	}
	if err := r.ReadInto(d, make([]byte, 100)); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("reading a forgotten producer's segment: %v", err)
	}
	rep, _ = CleanOrphans(dir, CleanOptions{Grace: -1})
	if len(rep.Removed) != 1 {
		t.Fatalf("sweep after the consumer let go: %s", rep)
	}
}
