package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
)

func cudaAvailable() (bool, string) {
	n, err := cuda.DeviceCount()
	if err != nil {
		return false, err.Error()
	}
	if n == 0 {
		return false, "the driver sees no device"
	}
	return true, ""
}

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in      string
		want    Spec
		wantErr string
	}{
		{in: "auto", want: Spec{Auto: true}},
		{in: "", want: Spec{Auto: true}},
		{in: "cpu", want: Spec{Backend: CPU}},
		{in: "CUDA", want: Spec{Backend: CUDA}},
		{in: "cuda:3", want: Spec{Backend: CUDA, Index: 3}},
		{in: "cuda:-1", wantErr: "bad device"},
		{in: "cuda:x", wantErr: "bad device"},
		{in: "tpu", wantErr: "bad device"},
	}
	for _, tt := range tests {
		got, err := ParseSpec(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseSpec(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestOpenWithoutCUDA(t *testing.T) {
	if ok, _ := cudaAvailable(); ok {
		t.Skip("this machine has a CUDA device")
	}
	d, note, err := Open(Spec{Auto: true})
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	if d.Info().Backend != CPU {
		t.Errorf("auto picked %s, want the CPU", d.Info().Backend)
	}
	if !strings.Contains(note, "CPU") || !strings.Contains(note, "libcuda") {
		t.Errorf("auto's note %q should say it uses the CPU and why (libcuda)", note)
	}
	if strings.Contains(note, "searched") {
		t.Errorf("auto's note %q lists where it searched; that is doctor's", note)
	}
	if _, ok := CUDAOf(d); ok {
		t.Error("CUDAOf(cpu device) = ok")
	}

	d, _, err = Open(Spec{Backend: CUDA, Index: 0})
	if err == nil || d != nil {
		t.Fatalf("cuda:0 without CUDA: device %v, err %v; want an error", d, err)
	}
	for _, want := range []string{"cuda:0", "no CUDA driver", "searched"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func openCUDAForTest(t *testing.T) Device {
	t.Helper()
	if ok, why := cudaAvailable(); !ok {
		t.Skipf("no CUDA device: %s", why)
	}
	d, _, err := Open(Spec{Backend: CUDA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestCUDADeviceRoundTrip(t *testing.T) {
	d := openCUDAForTest(t)
	info := d.Info()
	t.Logf("%+v", info)
	if info.Backend != CUDA || info.ID != "cuda:0" || info.Arch == "" || info.Driver == "" {
		t.Errorf("info = %+v", info)
	}
	if _, ok := CUDAOf(d); !ok {
		t.Error("CUDAOf(cuda device) not ok")
	}
	const n = 1 << 20
	pinned, free, err := d.AllocPinned(n)
	if err != nil {
		t.Fatal(err)
	}
	defer free()
	for i := range pinned {
		pinned[i] = byte(i % 251)
	}
	a, _ := d.Alloc(n)
	b, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	defer b.Free()
	if _, ok := CUDAPtrOf(a); !ok {
		t.Error("CUDAPtrOf not ok")
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := CUDAStreamOf(s); !ok {
		t.Error("CUDAStreamOf not ok")
	}
	start, _ := s.Record()
	must(t, s.CopyHtoD(a, 0, pinned))
	must(t, s.CopyDtoD(b, 100, a, 0, n-100))
	must(t, s.Memset(b, 0, 100, 7))
	end, _ := s.Record()
	back := make([]byte, n)
	must(t, s.CopyDtoH(back, b, 0))
	must(t, s.Sync())
	want := append(bytes.Repeat([]byte{7}, 100), pinned[:n-100]...)
	if !bytes.Equal(back, want) {
		t.Error("round trip through H2D, DtoD, memset, DtoH lost data")
	}
	el, err := end.Since(start)
	if err != nil || el <= 0 {
		t.Errorf("Since = %v, %v", el, err)
	}
	if done, err := end.Done(); !done || err != nil {
		t.Errorf("Done = %v, %v", done, err)
	}
	start.Close()
	end.Close()

	// Errors, not crashes: out of range, foreign buffers, use after free.
	if err := s.CopyHtoD(a, n-1, pinned[:2]); err == nil {
		t.Error("copy past the end succeeded")
	}
	if err := s.CopyHtoD(&HostBuffer{data: make([]byte, 8)}, 0, pinned[:2]); err == nil {
		t.Error("copy into a CPU buffer succeeded")
	}
	c, _ := d.Alloc(16)
	c.Free()
	if err := s.Memset(c, 0, 16, 0); err == nil || !strings.Contains(err.Error(), "after Free") {
		t.Errorf("use after free: %v", err)
	}
	if free, total, err := d.MemInfo(); err != nil || free <= 0 || total < free {
		t.Errorf("MemInfo = %d, %d, %v", free, total, err)
	}
}

func TestCUDARegister(t *testing.T) {
	d := openCUDAForTest(t)
	mem := make([]byte, 4<<20)
	unregister, err := d.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	if err := unregister(); err != nil {
		t.Fatal(err)
	}
	if err := unregister(); err != nil {
		t.Errorf("second unregister: %v (want a no-op)", err)
	}
}

func TestCUDAAllocTooLargeSaysHowMuchIsFree(t *testing.T) {
	d := openCUDAForTest(t)
	_, err := d.Alloc(1 << 50)
	if err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_OUT_OF_MEMORY") || !strings.Contains(err.Error(), "bytes free") {
		t.Errorf("err = %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// auto's note names the missing library and leaves the places searched,
// a few hundred columns of them, to doctor; other reasons pass whole.
func TestBriefly(t *testing.T) {
	nf := &cuda.NotFoundError{Names: []string{"libcuda.so.1"}, Searched: []string{"MSTAR_LIBCUDA (unset)", "/usr/lib64"}}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("no CUDA driver: %w", nf), "no CUDA driver: libcuda.so.1 not found (see 'mstar doctor')"},
		{errors.New("no CUDA device: cuInit: CUDA_ERROR_NO_DEVICE"), "no CUDA device: cuInit: CUDA_ERROR_NO_DEVICE"},
	} {
		if got := briefly(tc.err); got != tc.want {
			t.Errorf("briefly(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
