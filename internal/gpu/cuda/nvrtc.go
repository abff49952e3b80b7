package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/mstar-dev/mstar/internal/sigstack"
)

// nvrtcAPI holds the bound NVRTC functions.
type nvrtcAPI struct {
	version     func(major, minor *int32) int32
	errorString func(r int32) *byte
	create      func(prog *uintptr, src *byte, name *byte, nHeaders int32, headers, names unsafe.Pointer) int32
	destroy     func(prog *uintptr) int32
	compile     func(prog uintptr, nOpts int32, opts unsafe.Pointer) int32
	logSize     func(prog uintptr, n *uint64) int32
	log         func(prog uintptr, buf *byte) int32
	ptxSize     func(prog uintptr, n *uint64) int32
	ptx         func(prog uintptr, buf *byte) int32
	cubinSize   func(prog uintptr, n *uint64) int32
	cubin       func(prog uintptr, buf *byte) int32
}

// NVRTC is the loaded runtime compiler.
type NVRTC struct {
	api          nvrtcAPI
	comp         Component
	major, minor int
}

var (
	nvrtcOnce sync.Once
	nvrtcLib  *NVRTC
	nvrtcErr  error
	nvrtcComp Component
)

// LoadNVRTC finds and loads NVRTC once per process (see Discover for where
// it looks, and EnvNVRTC to choose one).
func LoadNVRTC() (*NVRTC, error) {
	nvrtcOnce.Do(func() {
		l := loadLibrary(nvrtcSpec, realEnv())
		nvrtcComp = l.comp
		if l.err != nil {
			nvrtcErr = fmt.Errorf("no NVRTC: %v", l.err)
			return
		}
		n := &NVRTC{comp: l.comp}
		b := &binder{lib: "NVRTC", h: l.handle}
		a := &n.api
		b.bind(&a.version, "nvrtcVersion")
		b.bind(&a.errorString, "nvrtcGetErrorString")
		b.bind(&a.create, "nvrtcCreateProgram")
		b.bind(&a.destroy, "nvrtcDestroyProgram")
		b.bind(&a.compile, "nvrtcCompileProgram")
		b.bind(&a.logSize, "nvrtcGetProgramLogSize")
		b.bind(&a.log, "nvrtcGetProgramLog")
		b.bind(&a.ptxSize, "nvrtcGetPTXSize")
		b.bind(&a.ptx, "nvrtcGetPTX")
		b.bind(&a.cubinSize, "nvrtcGetCUBINSize")
		b.bind(&a.cubin, "nvrtcGetCUBIN")
		if err := b.err(); err != nil {
			nvrtcErr = fmt.Errorf("NVRTC %s: %w", l.comp.Path, err)
			nvrtcComp.Err = nvrtcErr.Error()
			return
		}
		var maj, min int32
		if r := a.version(&maj, &min); r != 0 {
			nvrtcErr = n.err(r, "nvrtcVersion")
			nvrtcComp.Err = nvrtcErr.Error()
			return
		}
		n.major, n.minor = int(maj), int(min)
		n.comp.Version = n.Version()
		nvrtcComp.Version = n.comp.Version
		nvrtcLib = n
	})
	return nvrtcLib, nvrtcErr
}

// Version is NVRTC's "major.minor".
func (n *NVRTC) Version() string { return fmt.Sprintf("%d.%d", n.major, n.minor) }

// Path is the library file loaded.
func (n *NVRTC) Path() string { return n.comp.Path }

func (n *NVRTC) err(r int32, call string) error {
	return &Error{Call: call, Code: int(r), Name: goString(n.api.errorString(r))}
}

// CompileError is a failed compilation, with NVRTC's log.
type CompileError struct {
	Name string // the program's name
	Err  error  // the NVRTC call that failed
	Log  string // the compiler's messages
	Hint string // what to do, when mstar can tell (missing headers)
}

func (e *CompileError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "compiling %s: %v", e.Name, e.Err)
	if e.Hint != "" {
		b.WriteString("; " + e.Hint)
	}
	if log := strings.TrimSpace(e.Log); log != "" {
		b.WriteString(":\n" + log)
	}
	return b.String()
}

func (e *CompileError) Unwrap() error { return e.Err }

// Compile compiles CUDA C source. opts go to NVRTC as they are (include
// --gpu-architecture). When cubin is true it returns the CUBIN (the
// architecture must be a real one, sm_XY), otherwise PTX. The log is
// returned too; it may hold warnings when compilation succeeded.
func (n *NVRTC) Compile(src, name string, opts []string, cubin bool) (image []byte, log string, err error) {
	csrc, cname := cString(src), cString(name)
	var prog uintptr
	if r := n.api.create(&prog, &csrc[0], &cname[0], 0, nil, nil); r != 0 {
		return nil, "", &CompileError{Name: name, Err: n.err(r, "nvrtcCreateProgram")}
	}
	defer n.api.destroy(&prog)

	// The options are C strings in Go memory, handed over as an array of
	// pointers: pin both for the call.
	var pin runtime.Pinner
	defer pin.Unpin()
	cOpts := make([]*byte, len(opts))
	for i, o := range opts {
		b := cString(o)
		pin.Pin(&b[0])
		cOpts[i] = &b[0]
	}
	var optsPtr unsafe.Pointer
	if len(cOpts) > 0 {
		pin.Pin(&cOpts[0])
		optsPtr = unsafe.Pointer(&cOpts[0])
	}
	r := n.api.compile(prog, int32(len(opts)), optsPtr)
	runtime.KeepAlive(cOpts)
	sigstack.Fix() // NVRTC's LLVM puts Go's SIGINT handler back without SA_ONSTACK
	log = n.programLog(prog)
	if r != 0 {
		return nil, log, &CompileError{Name: name, Err: n.err(r, "nvrtcCompileProgram"), Log: log}
	}
	sizeFn, getFn, what := n.api.ptxSize, n.api.ptx, "PTX"
	if cubin {
		sizeFn, getFn, what = n.api.cubinSize, n.api.cubin, "CUBIN"
	}
	var size uint64
	if r := sizeFn(prog, &size); r != 0 {
		return nil, log, &CompileError{Name: name, Err: n.err(r, "nvrtcGet"+what+"Size"), Log: log}
	}
	if size == 0 {
		return nil, log, &CompileError{Name: name, Err: fmt.Errorf("NVRTC returned an empty %s", what), Log: log}
	}
	image = make([]byte, size)
	if r := getFn(prog, &image[0]); r != 0 {
		return nil, log, &CompileError{Name: name, Err: n.err(r, "nvrtcGet"+what), Log: log}
	}
	return image, log, nil
}

func (n *NVRTC) programLog(prog uintptr) string {
	var size uint64
	if n.api.logSize(prog, &size) != 0 || size <= 1 {
		return ""
	}
	buf := make([]byte, size)
	if n.api.log(prog, &buf[0]) != 0 {
		return ""
	}
	return strings.TrimRight(string(buf), "\x00")
}

// Compiler compiles kernels with NVRTC for one architecture, adds the CUDA
// include folder, and caches the results on disk.
type Compiler struct {
	nvrtc   *NVRTC
	Arch    string // "sm_90a"
	Include Component
	Cache   *Cache // nil: no cache
}

// NewCompiler loads NVRTC, finds the CUDA headers and opens the default
// cache. A missing header folder is not an error here: sources that do not
// include CUDA headers still compile, and those that do fail saying where
// mstar looked.
func NewCompiler(arch string) (*Compiler, error) {
	n, err := LoadNVRTC()
	if err != nil {
		return nil, err
	}
	c := &Compiler{nvrtc: n, Arch: arch}
	c.Include = locateHeaders(realEnv(), filepath.Dir(n.Path()))
	if dir, err := DefaultCacheDir(); err == nil {
		c.Cache = &Cache{Dir: dir}
	}
	return c, nil
}

// NVRTC returns the loaded compiler library.
func (c *Compiler) NVRTC() *NVRTC { return c.nvrtc }

// CompileResult says what a compilation produced and how.
type CompileResult struct {
	Image    []byte // CUBIN or PTX
	Kind     string // "cubin" or "ptx"
	CacheHit bool   // true when the image came from the disk cache
	Seconds  float64
	Log      string   // NVRTC's messages (empty on a cache hit)
	Options  []string // the full option list given to NVRTC
	Key      string   // the cache key (sha256, hex)
	Warning  string   // a cache problem that did not stop the compile
}

// Options returns the NVRTC options for opts: the architecture, the include
// folders, then opts.
func (c *Compiler) Options(opts []string) []string {
	out := []string{"--gpu-architecture=" + c.Arch}
	if c.Include.Path != "" {
		out = append(out, "--include-path="+c.Include.Path)
		// CUDA 13 keeps libcu++ (cuda/std, nv/target) under include/cccl.
		if st, err := os.Stat(filepath.Join(c.Include.Path, "cccl")); err == nil && st.IsDir() {
			out = append(out, "--include-path="+filepath.Join(c.Include.Path, "cccl"))
		}
	}
	return append(out, opts...)
}

// Compile compiles src (name is for messages and the log) with opts added to
// the architecture and include folders, through the cache. A real
// architecture (sm_XY) yields CUBIN, a virtual one (compute_XY) PTX.
func (c *Compiler) Compile(src, name string, opts []string) (*CompileResult, error) {
	full := c.Options(opts)
	cubin := strings.HasPrefix(c.Arch, "sm_")
	kind := "ptx"
	if cubin {
		kind = "cubin"
	}
	res := &CompileResult{Kind: kind, Options: full}
	key := CacheKey{Source: src, Name: name, Arch: c.Arch, Options: full, Compiler: "nvrtc " + c.nvrtc.Version() + " " + kind}
	res.Key = key.Hash()
	compile := func() ([]byte, error) {
		img, log, err := c.nvrtc.Compile(src, name, full, cubin)
		res.Log = log
		if err != nil {
			if ce, ok := err.(*CompileError); ok && c.Include.Path == "" && mentionsCUDAHeader(ce.Log) {
				ce.Hint = fmt.Sprintf("the CUDA headers were not found (searched %s); set %s to the toolkit's include folder",
					strings.Join(c.Include.Searched, ", "), EnvInclude)
			}
			return nil, err
		}
		return img, nil
	}
	start := time.Now()
	var err error
	if c.Cache != nil {
		var warn error
		res.Image, res.CacheHit, warn, err = c.Cache.GetOrCompile(key, compile)
		if warn != nil {
			res.Warning = warn.Error()
		}
	} else {
		res.Image, err = compile()
	}
	res.Seconds = time.Since(start).Seconds()
	if err != nil {
		return nil, err
	}
	return res, nil
}

// mentionsCUDAHeader reports whether a compile log is NVRTC failing to find
// an include ("catastrophic error: cannot open source file "cuda_bf16.h"").
func mentionsCUDAHeader(log string) bool {
	return strings.Contains(log, "cannot open source file")
}

// CompileModule compiles src for this context's device and loads it.
func (c *Context) CompileModule(comp *Compiler, src, name string, opts []string) (*Module, *CompileResult, error) {
	res, err := comp.Compile(src, name, opts)
	if err != nil {
		return nil, nil, err
	}
	m, err := c.LoadModule(res.Image)
	if err != nil {
		return nil, res, fmt.Errorf("loading %s (%s for %s): %w", name, res.Kind, comp.Arch, err)
	}
	return m, res, nil
}

// Compiler returns the context's compiler for its device's architecture,
// made on first use (NVRTC loaded, headers found, default cache opened).
func (c *Context) Compiler() (*Compiler, error) {
	c.compOnce.Do(func() { c.comp, c.compErr = NewCompiler(c.props.Arch()) })
	return c.comp, c.compErr
}
