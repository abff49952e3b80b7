package cuda

// Tests that need a CUDA device. Without one they skip, saying why. Build
// them for the GPU machine with
//
//	go test -c -o bin/cuda.test ./internal/gpu/cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func openForTest(t *testing.T) *Context {
	t.Helper()
	c, err := Open(0)
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// compilerForTest is the device's compiler with a fresh cache of its own, so
// hits and misses are the test's.
func compilerForTest(t *testing.T, c *Context) *Compiler {
	t.Helper()
	comp, err := NewCompiler(c.Props().Arch())
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	comp.Cache = &Cache{Dir: t.TempDir()}
	return comp
}

func f32bytes(v []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)) }
func u16bytes(v []uint16) []byte  { return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 2*len(v)) }

// bf16 rounds a float32 to bfloat16 bits, to nearest even (finite inputs).
func bf16(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func TestGPUProps(t *testing.T) {
	c := openForTest(t)
	p := c.Props()
	t.Logf("%+v", p)
	if p.Name == "" || p.SMs <= 0 || p.MemBytes <= 0 || p.CCMajor <= 0 || p.L2Bytes <= 0 {
		t.Errorf("implausible device facts: %+v", p)
	}
	if p.CCMajor == 9 && p.CCMinor == 0 && p.Arch() != "sm_90a" {
		t.Errorf("Hopper arch = %q, want sm_90a", p.Arch())
	}
	free, total, err := c.MemInfo()
	if err != nil || free <= 0 || free > total || total != p.MemBytes {
		t.Errorf("MemInfo = %d, %d, %v; total memory %d", free, total, err, p.MemBytes)
	}
}

const vaddSrc = `
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) c[i] = a[i] + b[i];
}
`

func TestGPUVectorAdd(t *testing.T) {
	c := openForTest(t)
	comp := compilerForTest(t, c)
	m, res, err := c.CompileModule(comp, vaddSrc, "vadd.cu", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	t.Logf("compiled %s for %s in %.1f ms", res.Kind, comp.Arch, res.Seconds*1e3)
	f, err := m.Function("vadd")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1<<20 + 3 // not a multiple of the block
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i), float32(2*i)
	}
	da, _ := c.Alloc(4 * n)
	db, _ := c.Alloc(4 * n)
	dc, err := c.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Free(da); c.Free(db); c.Free(dc) }()
	if err := c.MemcpyHtoD(da, f32bytes(a)); err != nil {
		t.Fatal(err)
	}
	if err := c.MemcpyHtoD(db, f32bytes(b)); err != nil {
		t.Fatal(err)
	}
	if err := c.Memset(dc, 0xff, 4*n); err != nil { // NaN: unwritten results show
		t.Fatal(err)
	}
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	if err := f.Launch(s, Dim3{X: (n + 255) / 256}, Dim3{X: 256}, 0, da, db, dc, int32(n)); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := c.MemcpyDtoH(f32bytes(got), dc); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != float32(3*i) {
			t.Fatalf("c[%d] = %v, want %v", i, got[i], float32(3*i))
		}
	}
}

// bf16Src includes cuda_bf16.h and mma.h: it fails unless the CUDA headers
// were found and passed to NVRTC.
const bf16Src = `
#include <cuda_bf16.h>
#include <mma.h>
extern "C" __global__ void bf16mul(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, float* cf, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		float r = __bfloat162float(a[i]) * __bfloat162float(b[i]); // exact in fp32
		c[i] = __float2bfloat16_rn(r);
		cf[i] = r;
	}
}
`

func TestGPUBF16Kernel(t *testing.T) {
	c := openForTest(t)
	comp := compilerForTest(t, c)
	if comp.Include.Path == "" {
		t.Fatalf("CUDA headers not found: %s (searched %v)", comp.Include.Err, comp.Include.Searched)
	}
	m, res, err := c.CompileModule(comp, bf16Src, "bf16mul.cu", []string{"--std=c++17"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	t.Logf("NVRTC %s compiled a cuda_bf16.h + mma.h kernel for %s in %.1f ms (options %v)", comp.NVRTC().Version(), comp.Arch, res.Seconds*1e3, res.Options)
	f, err := m.Function("bf16mul")
	if err != nil {
		t.Fatal(err)
	}
	const n = 100003
	rng := rand.New(rand.NewPCG(1, 2))
	a, b := make([]uint16, n), make([]uint16, n)
	for i := range a {
		a[i] = bf16(float32(rng.NormFloat64() * 3))
		b[i] = bf16(float32(rng.NormFloat64() * 3))
	}
	da, _ := c.Alloc(2 * n)
	db, _ := c.Alloc(2 * n)
	dc, _ := c.Alloc(2 * n)
	dcf, err := c.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Free(da); c.Free(db); c.Free(dc); c.Free(dcf) }()
	c.MemcpyHtoD(da, u16bytes(a))
	c.MemcpyHtoD(db, u16bytes(b))
	s, _ := c.NewStream()
	defer s.Destroy()
	if err := f.Launch(s, Dim3{X: (n + 127) / 128}, Dim3{X: 128}, 0, da, db, dc, dcf, int32(n)); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got, gotf := make([]uint16, n), make([]float32, n)
	c.MemcpyDtoH(u16bytes(got), dc)
	c.MemcpyDtoH(f32bytes(gotf), dcf)
	for i := range got {
		want := bf16ToF32(a[i]) * bf16ToF32(b[i])
		if gotf[i] != want {
			t.Fatalf("fp32 product %d = %v, want %v", i, gotf[i], want)
		}
		if got[i] != bf16(want) {
			t.Fatalf("bf16 product %d = %#04x, want %#04x (of %v)", i, got[i], bf16(want), want)
		}
	}
}

func TestGPUCompileCacheHit(t *testing.T) {
	c := openForTest(t)
	comp := compilerForTest(t, c)
	first, err := comp.Compile(bf16Src, "bf16mul.cu", []string{"--std=c++17"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := comp.Compile(bf16Src, "bf16mul.cu", []string{"--std=c++17"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC compile %.1f ms; cache hit %.2f ms", first.Seconds*1e3, second.Seconds*1e3)
	if first.CacheHit || !second.CacheHit {
		t.Fatalf("hit flags: first %v, second %v; want false, true", first.CacheHit, second.CacheHit)
	}
	if string(first.Image) != string(second.Image) {
		t.Error("cached image differs from the compiled one")
	}
	third, err := comp.Compile(bf16Src, "bf16mul.cu", []string{"--std=c++17", "-DVARIANT=2"})
	if err != nil {
		t.Fatal(err)
	}
	if third.CacheHit {
		t.Error("different options hit the cache")
	}
}

func TestGPUCacheTornFileRecompiles(t *testing.T) {
	c := openForTest(t)
	comp := compilerForTest(t, c)
	res, err := comp.Compile(vaddSrc, "vadd.cu", nil)
	if err != nil {
		t.Fatal(err)
	}
	// What a writer killed mid-write without the rename protocol, or a
	// crash before the data reached the disk, would leave.
	matches, _ := os.ReadDir(comp.Cache.Dir)
	var path string
	for _, e := range matches {
		if strings.HasSuffix(e.Name(), ".bin") {
			path = comp.Cache.Dir + "/" + e.Name()
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no cache file after compiling: %v", err)
	}
	if err := os.Truncate(path, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	again, err := comp.Compile(vaddSrc, "vadd.cu", nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.CacheHit || again.Warning == "" {
		t.Fatalf("torn entry: hit %v, warning %q; want a recompile with a warning", again.CacheHit, again.Warning)
	}
	t.Logf("warning: %s", again.Warning)
	if string(again.Image) != string(res.Image) {
		t.Error("recompiled image differs")
	}
	m, err := c.LoadModule(again.Image)
	if err != nil {
		t.Fatal(err)
	}
	m.Unload()
	if third, _ := comp.Compile(vaddSrc, "vadd.cu", nil); third == nil || !third.CacheHit {
		t.Error("entry not repaired by the recompile")
	}
}

func TestGPUCompileErrorCarriesLog(t *testing.T) {
	c := openForTest(t)
	comp := compilerForTest(t, c)
	_, err := comp.Compile("extern \"C\" __global__ void k() { undeclared_thing = 1; }", "broken.cu", nil)
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *CompileError", err)
	}
	if !strings.Contains(ce.Log, "undeclared_thing") || !strings.Contains(err.Error(), "broken.cu") {
		t.Errorf("error lacks the log or the name: %v", err)
	}
}

const emptySrc = `extern "C" __global__ void empty() {}`

func TestGPUGraphLaunchOverhead(t *testing.T) {
	c := openForTest(t)
	comp := compilerForTest(t, c)
	m, _, err := c.CompileModule(comp, emptySrc, "empty.cu", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	f, _ := m.Function("empty")
	s, _ := c.NewStream()
	defer s.Destroy()
	const launches = 1000
	exec, err := s.Capture(func() error {
		for i := 0; i < launches; i++ {
			if err := f.Launch(s, Dim3{X: 1}, Dim3{X: 32}, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Destroy()
	start, _ := c.NewEvent(true)
	end, _ := c.NewEvent(true)
	defer start.Destroy()
	defer end.Destroy()
	// Warm-up replays, then timed ones.
	for i := 0; i < 3; i++ {
		if err := exec.Launch(s); err != nil {
			t.Fatal(err)
		}
	}
	var per []float64
	for i := 0; i < 15; i++ {
		s.Record(start)
		exec.Launch(s)
		s.Record(end)
		if err := end.Synchronize(); err != nil {
			t.Fatal(err)
		}
		d, err := end.Elapsed(start)
		if err != nil {
			t.Fatal(err)
		}
		per = append(per, d.Seconds()*1e6/launches)
	}
	sort.Float64s(per)
	med := per[len(per)/2]

	// Direct launches, for comparison.
	s.Record(start)
	for i := 0; i < launches; i++ {
		f.Launch(s, Dim3{X: 1}, Dim3{X: 32}, 0)
	}
	s.Record(end)
	end.Synchronize()
	direct, _ := end.Elapsed(start)
	t.Logf("graph replay: %.2f µs per kernel launch (median of %d replays of %d launches; min %.2f max %.2f); direct launches: %.2f µs each",
		med, len(per), launches, per[0], per[len(per)-1], direct.Seconds()*1e6/launches)
	if med >= 5 {
		t.Errorf("graph replay costs %.2f µs per launch; the target is < 5 µs", med)
	}
}

func TestGPUStreamsEventsAndHostMemory(t *testing.T) {
	c := openForTest(t)
	const n = 64 << 20
	pinned, err := c.HostAlloc(n, HostAllocPortable)
	if err != nil {
		t.Fatal(err)
	}
	defer c.FreeHost(pinned)
	for i := range pinned {
		pinned[i] = byte(i * 7)
	}
	d1, _ := c.Alloc(n)
	d2, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Free(d1); c.Free(d2) }()
	s, _ := c.NewStream()
	defer s.Destroy()
	ev0, _ := c.NewEvent(true)
	ev1, _ := c.NewEvent(true)
	defer ev0.Destroy()
	defer ev1.Destroy()

	// Registered mmapped memory (what the shm arena does) as the target.
	mm, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mm)
	if err := c.HostRegister(mm, HostRegisterPortable); err != nil {
		t.Fatal(err)
	}
	defer c.HostUnregister(mm)

	s.Record(ev0)
	if err := s.CopyHtoD(d1, pinned); err != nil {
		t.Fatal(err)
	}
	s.Record(ev1)
	if err := s.CopyDtoD(d2, d1, n); err != nil {
		t.Fatal(err)
	}
	if err := s.Memset(d1, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoH(mm, d2); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if done, err := ev1.Query(); !done || err != nil {
		t.Errorf("event after sync: done %v err %v", done, err)
	}
	d, err := ev1.Elapsed(ev0)
	if err != nil || d <= 0 {
		t.Errorf("elapsed = %v, %v", d, err)
	}
	t.Logf("pinned H2D of %d MiB: %v (%.1f GB/s)", n>>20, d, float64(n)/d.Seconds()/1e9)
	for i := 0; i < n; i += 4093 {
		if mm[i] != byte(i*7) {
			t.Fatalf("byte %d = %d after H2D, DtoD, DtoH; want %d", i, mm[i], byte(i*7))
		}
	}
}

func TestGPUOutOfMemoryError(t *testing.T) {
	c := openForTest(t)
	_, err := c.Alloc(1 << 50)
	if err == nil {
		t.Fatal("allocating a petabyte succeeded")
	}
	if !errors.Is(err, ErrOutOfMemory) || !strings.HasPrefix(err.Error(), "cuMemAlloc(1125899906842624): CUDA_ERROR_OUT_OF_MEMORY") {
		t.Errorf("err = %q", err)
	}
}

// The driver's current context is per OS thread; goroutines on many
// threads must all find it current.
func TestGPUContextFromManyThreads(t *testing.T) {
	c := openForTest(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				p, err := c.Alloc(4096)
				if err != nil {
					errs <- err
					return
				}
				buf := make([]byte, 4096)
				buf[g] = byte(g)
				if err := c.MemcpyHtoD(p, buf); err != nil {
					errs <- err
				}
				time.Sleep(time.Microsecond) // let the scheduler move us
				out := make([]byte, 4096)
				if err := c.MemcpyDtoH(out, p); err != nil || out[g] != byte(g) {
					errs <- errors.Join(err, errors.New("round trip lost data"))
				}
				c.Free(p)
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestGPUCublasGemmBF16(t *testing.T) {
	c := openForTest(t)
	b, err := c.NewBLAS()
	if err != nil {
		t.Skipf("no cuBLAS: %v", err)
	}
	defer b.Destroy()
	// Column-major C[m×n] = A[m×k]·B[k×n].
	const m, n, k = 96, 80, 64
	rng := rand.New(rand.NewPCG(3, 4))
	a, bb := make([]uint16, m*k), make([]uint16, k*n)
	for i := range a {
		a[i] = bf16(float32(rng.Float64()*2 - 1))
	}
	for i := range bb {
		bb[i] = bf16(float32(rng.Float64()*2 - 1))
	}
	da, _ := c.Alloc(2 * m * k)
	db, _ := c.Alloc(2 * k * n)
	dc, _ := c.Alloc(4 * m * n)
	defer func() { c.Free(da); c.Free(db); c.Free(dc) }()
	c.MemcpyHtoD(da, u16bytes(a))
	c.MemcpyHtoD(db, u16bytes(bb))
	s, _ := c.NewStream()
	defer s.Destroy()
	if err := b.SetStream(s); err != nil {
		t.Fatal(err)
	}
	if err := b.GemmEx(OpN, OpN, m, n, k, 1, da, DataBF16, m, db, DataBF16, k, 0, dc, DataF32, m); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, m*n)
	c.MemcpyDtoH(f32bytes(got), dc)
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			var want float64
			for l := 0; l < k; l++ {
				want += float64(bf16ToF32(a[i+l*m])) * float64(bf16ToF32(bb[l+j*k]))
			}
			if d := math.Abs(float64(got[i+j*m]) - want); d > 1e-4*math.Max(1, math.Abs(want)) {
				t.Fatalf("C[%d,%d] = %v, want %v", i, j, got[i+j*m], want)
			}
		}
	}
}

// pdlSrc: first sleeps ~50 µs in one block, after letting its dependents
// launch, then writes a; second notes when it started, waits for first and
// copies a to b. With a programmatic launch second starts while first
// sleeps, and still copies what first wrote.
const pdlSrc = `
__device__ unsigned long long now() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
extern "C" __global__ void first(int* a, int n, unsigned long long* times) {
	asm volatile("griddepcontrol.wait;" ::: "memory");
	asm volatile("griddepcontrol.launch_dependents;");
	unsigned long long t0 = now();
	while (now() - t0 < 50000) __nanosleep(1000);
	for (int i = threadIdx.x; i < n; i += blockDim.x) a[i] = i + 1;
	__syncthreads();
	if (threadIdx.x == 0) times[0] = now();
}
extern "C" __global__ void second(const int* a, int* b, int n, unsigned long long* times) {
	if (threadIdx.x == 0 && blockIdx.x == 0) times[1] = now();
	asm volatile("griddepcontrol.wait;" ::: "memory");
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) b[i] = a[i];
}
`

func TestGPUProgrammaticLaunch(t *testing.T) {
	c := openForTest(t)
	if !c.ProgrammaticLaunch() {
		t.Skipf("no programmatic dependent launch here (driver cuLaunchKernelEx: %v, sm_%d%d)", launchEx, c.Props().CCMajor, c.Props().CCMinor)
	}
	comp := compilerForTest(t, c)
	m, _, err := c.CompileModule(comp, pdlSrc, "pdl.cu", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	first, _ := m.Function("first")
	second, err := m.Function("second")
	if err != nil {
		t.Fatal(err)
	}
	const n = 4096
	da, _ := c.Alloc(4 * n)
	db, _ := c.Alloc(4 * n)
	dt, err := c.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Free(da); c.Free(db); c.Free(dt) }()
	s, _ := c.NewStream()
	defer s.Destroy()
	pair := func() error {
		if err := first.LaunchProgrammatic(s, Dim3{X: 1}, Dim3{X: 256}, 0, da, int32(n), dt); err != nil {
			return err
		}
		return second.LaunchProgrammatic(s, Dim3{X: n / 256}, Dim3{X: 256}, 0, da, db, int32(n), dt)
	}
	graph, err := s.Capture(pair)
	if err != nil {
		t.Fatal(err)
	}
	defer graph.Destroy()
	for _, way := range []struct {
		name string
		run  func() error
	}{{"direct", pair}, {"graph", func() error { return graph.Launch(s) }}} {
		for _, d := range []DevicePtr{da, db} {
			if err := c.Memset(d, 0, 4*n); err != nil {
				t.Fatal(err)
			}
		}
		if err := way.run(); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]int32, n)
		if err := c.MemcpyDtoH(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), 4*n), db); err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if v != int32(i+1) {
				t.Fatalf("%s: b[%d] = %d, want %d: second read a before first wrote it", way.name, i, v, i+1)
			}
		}
		times := make([]uint64, 2)
		if err := c.MemcpyDtoH(unsafe.Slice((*byte)(unsafe.Pointer(&times[0])), 16), dt); err != nil {
			t.Fatal(err)
		}
		// The point of the launch: second was scheduled before first ended.
		if times[1] >= times[0] {
			t.Errorf("%s: second started %d ns after first ended: the launch was not programmatic", way.name, times[1]-times[0])
		} else {
			t.Logf("%s: second started %.1f µs before first ended", way.name, float64(times[0]-times[1])/1e3)
		}
	}
}
