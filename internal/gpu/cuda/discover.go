package cuda

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// Discovery is where the device layer found, or failed to find, each piece
// of CUDA it loads at run time. It is plain data for `mstar doctor` to print.
// Each part lists every place searched, in order, and the environment
// variable that overrides the search.
type Discovery struct {
	Driver  Component // libcuda.so.1
	NVRTC   Component // libnvrtc.so.13 / .12 / .11.2
	CUBLAS  Component // libcublas.so.13 / .12
	Headers Component // the folder holding cuda_bf16.h
}

// Components returns the four parts in a fixed order.
func (d Discovery) Components() []Component {
	return []Component{d.Driver, d.NVRTC, d.CUBLAS, d.Headers}
}

// Component is one library or header folder.
type Component struct {
	Name     string   // "libcuda", "NVRTC", "cuBLAS", "CUDA headers"
	Path     string   // where it was found; "" when not found
	EnvVar   string   // the environment variable that overrides the search
	Searched []string // every place looked, in order
	Version  string   // when known, e.g. "13.0"
	Err      string   // why it is unusable: not found, or found but failed to load
}

// Found reports whether the component was found and is usable.
func (c Component) Found() bool { return c.Path != "" && c.Err == "" }

// Environment variables that override discovery. Each takes a file or, for
// the libraries, a folder holding it.
const (
	EnvDriver   = "MSTAR_LIBCUDA"
	EnvNVRTC    = "MSTAR_NVRTC"
	EnvCUBLAS   = "MSTAR_CUBLAS"
	EnvInclude  = "MSTAR_CUDA_INCLUDE"
	EnvCacheDir = "MSTAR_CACHE_DIR"
)

// sysEnv is what discovery reads from the system; tests replace it with
// fake folders and variables.
type sysEnv struct {
	root   string // prefix of the fixed system folders ("" for the real system)
	getenv func(string) string
	glob   func(string) ([]string, error)
	exists func(string) bool
}

func realEnv() sysEnv {
	return sysEnv{
		getenv: os.Getenv,
		glob:   filepath.Glob,
		exists: func(p string) bool {
			st, err := os.Stat(p)
			return err == nil && !st.IsDir()
		},
	}
}

// libSpec describes a shared library and where to look for it.
type libSpec struct {
	name   string   // "NVRTC"
	env    string   // override variable
	files  []string // file names, most preferred first
	byName []string // names handed to the dynamic loader as a last resort
	// nameFirst tries the dynamic loader before the folders (the driver,
	// which is installed system-wide and loads by name).
	nameFirst bool
	dirs      func(e sysEnv) []string
	// wheel is the python wheel folder that carries it (nvidia/<wheel>/lib).
	wheel string
}

var (
	driverSpec = libSpec{
		name:      "libcuda",
		env:       EnvDriver,
		files:     []string{"libcuda.so.1", "libcuda.so"},
		byName:    []string{"libcuda.so.1"},
		nameFirst: true,
		dirs:      driverDirs,
	}
	nvrtcSpec = libSpec{
		name:   "NVRTC",
		env:    EnvNVRTC,
		files:  []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"},
		byName: []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"},
		wheel:  "cuda_nvrtc",
		dirs:   toolkitLibDirs,
	}
	cublasSpec = libSpec{
		name:   "cuBLAS",
		env:    EnvCUBLAS,
		files:  []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so"},
		byName: []string{"libcublas.so.13", "libcublas.so.12"},
		wheel:  "cublas",
		dirs:   toolkitLibDirs,
	}
)

// targetTriple is the folder name CUDA uses for this platform under targets/.
func targetTriple() string {
	if runtime.GOARCH == "arm64" {
		return "sbsa-linux"
	}
	return "x86_64-linux"
}

// at places a fixed system path under the environment's root.
func (e sysEnv) at(p string) string {
	if e.root == "" {
		return p
	}
	return filepath.Join(e.root, p)
}

func driverDirs(e sysEnv) []string {
	var dirs []string
	for _, d := range []string{
		"/usr/lib/x86_64-linux-gnu",
		"/usr/lib/aarch64-linux-gnu",
		"/usr/lib64",
		"/usr/local/nvidia/lib64",
		"/usr/local/nvidia/lib",
		"/usr/lib/wsl/lib",
	} {
		dirs = append(dirs, e.at(d))
	}
	return dirs
}

// cudaRoots are toolkit installs, in order: CUDA_HOME, CUDA_PATH,
// /usr/local/cuda, then /usr/local/cuda-X.Y newest first.
func cudaRoots(e sysEnv) []string {
	var roots []string
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if p := e.getenv(v); p != "" {
			roots = append(roots, p)
		}
	}
	roots = append(roots, e.at("/usr/local/cuda"))
	versioned, _ := e.glob(e.at("/usr/local/cuda-*"))
	sort.Slice(versioned, func(i, j int) bool { return versionLess(versioned[j], versioned[i]) })
	return append(roots, versioned...)
}

// versionLess orders "/usr/local/cuda-12.8" before "/usr/local/cuda-13.0".
func versionLess(a, b string) bool {
	va, vb := versionNums(a), versionNums(b)
	for i := 0; i < len(va) && i < len(vb); i++ {
		if va[i] != vb[i] {
			return va[i] < vb[i]
		}
	}
	if len(va) != len(vb) {
		return len(va) < len(vb)
	}
	return a < b
}

func versionNums(p string) []int {
	_, v, _ := strings.Cut(filepath.Base(p), "-")
	var out []int
	for _, f := range strings.Split(v, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			break
		}
		out = append(out, n)
	}
	return out
}

// sitePackages are python package folders where NVIDIA's wheels (nvidia/cu13,
// nvidia/cuda_nvrtc, ...) may live.
func sitePackages(e sysEnv) []string {
	var pats []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := e.getenv(v); p != "" {
			pats = append(pats, filepath.Join(p, "lib/python3*/site-packages"))
		}
	}
	for _, p := range filepath.SplitList(e.getenv("PYTHONPATH")) {
		if p != "" {
			pats = append(pats, p)
		}
	}
	if h := e.getenv("HOME"); h != "" {
		pats = append(pats, filepath.Join(h, ".local/lib/python3*/site-packages"))
	}
	for _, p := range []string{
		"/opt/*/.venv/lib/python3*/site-packages",
		"/opt/*/venv/lib/python3*/site-packages",
		"/usr/local/lib/python3*/dist-packages",
		"/usr/local/lib/python3*/site-packages",
		"/usr/lib/python3/dist-packages",
	} {
		pats = append(pats, e.at(p))
	}
	var dirs []string
	seen := map[string]bool{}
	for _, pat := range pats {
		m, _ := e.glob(pat)
		if !strings.ContainsAny(pat, "*?[") {
			m = []string{pat}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(m)))
		for _, d := range m {
			if !seen[d] {
				seen[d] = true
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

func toolkitLibDirs(e sysEnv) []string {
	var dirs []string
	for _, r := range cudaRoots(e) {
		dirs = append(dirs, filepath.Join(r, "lib64"), filepath.Join(r, "targets", targetTriple(), "lib"))
	}
	return dirs
}

func (s libSpec) allDirs(e sysEnv) []string {
	dirs := s.dirs(e)
	if s.wheel != "" {
		for _, sp := range sitePackages(e) {
			dirs = append(dirs, filepath.Join(sp, "nvidia/cu13/lib"), filepath.Join(sp, "nvidia", s.wheel, "lib"))
		}
	}
	return dirs
}

// candidate is one place to try: a file path, or a name for the dynamic loader.
type candidate struct {
	path   string
	byName bool
}

// locate returns the override (when its variable is set) or the places to
// try in order, and every place searched for reporting. A set override is
// the only candidate: a user who names a library means that one.
func (s libSpec) locate(e sysEnv) (cands []candidate, searched []string, overrideErr string) {
	if v := e.getenv(s.env); v != "" {
		p := v
		if !e.exists(p) {
			for _, f := range s.files {
				if e.exists(filepath.Join(v, f)) {
					p = filepath.Join(v, f)
					break
				}
			}
		}
		searched = append(searched, s.env+"="+v)
		if !e.exists(p) {
			return nil, searched, fmt.Sprintf("%s=%s: no %s there", s.env, v, strings.Join(s.files, " or "))
		}
		return []candidate{{path: p}}, searched, ""
	}
	searched = append(searched, s.env+" (unset)")
	var names []candidate
	for _, n := range s.byName {
		names = append(names, candidate{path: n, byName: true})
	}
	if s.nameFirst {
		cands = append(cands, names...)
	}
	for _, d := range s.allDirs(e) {
		for _, f := range s.files {
			p := filepath.Join(d, f)
			if e.exists(p) {
				cands = append(cands, candidate{path: p})
			}
		}
	}
	if !s.nameFirst {
		cands = append(cands, names...)
	}
	// Report folders rather than every file name tried in each.
	return cands, append(searched, orderedSearch(s, e)...), ""
}

func orderedSearch(s libSpec, e sysEnv) []string {
	var out []string
	loader := fmt.Sprintf("%s via the dynamic loader (LD_LIBRARY_PATH, ld.so.cache)", strings.Join(s.byName, ", "))
	if s.nameFirst {
		out = append(out, loader)
	}
	out = append(out, s.allDirs(e)...)
	if !s.nameFirst {
		out = append(out, loader)
	}
	return out
}

// headerDirs are the folders searched for cuda_bf16.h, in order. libDir is
// the folder NVRTC was loaded from ("" when unknown): its include folder is
// the most likely match for its version.
func headerDirs(e sysEnv, libDir string) []string {
	var dirs []string
	if libDir != "" {
		dirs = append(dirs,
			filepath.Join(libDir, "..", "include"),             // <root>/lib64 -> <root>/include; targets/<t>/lib -> targets/<t>/include
			filepath.Join(libDir, "..", "..", "..", "include"), // targets/<t>/lib -> <root>/include
		)
	}
	for _, r := range cudaRoots(e) {
		dirs = append(dirs, filepath.Join(r, "include"), filepath.Join(r, "targets", targetTriple(), "include"))
	}
	for _, sp := range sitePackages(e) {
		dirs = append(dirs, filepath.Join(sp, "nvidia/cu13/include"), filepath.Join(sp, "nvidia/cuda_runtime/include"))
	}
	dirs = append(dirs, e.at("/usr/include"))
	out := dirs[:0]
	seen := map[string]bool{}
	for _, d := range dirs {
		d = filepath.Clean(d)
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// HeaderFile is the header whose folder is passed to NVRTC as --include-path.
const HeaderFile = "cuda_bf16.h"

// locateHeaders finds the folder holding cuda_bf16.h.
func locateHeaders(e sysEnv, libDir string) Component {
	c := Component{Name: "CUDA headers", EnvVar: EnvInclude}
	if v := e.getenv(EnvInclude); v != "" {
		c.Searched = []string{EnvInclude + "=" + v}
		if e.exists(filepath.Join(v, HeaderFile)) {
			c.Path = v
		} else {
			c.Err = fmt.Sprintf("%s=%s: no %s there", EnvInclude, v, HeaderFile)
		}
		return c
	}
	c.Searched = []string{EnvInclude + " (unset)"}
	for _, d := range headerDirs(e, libDir) {
		c.Searched = append(c.Searched, d)
		if e.exists(filepath.Join(d, HeaderFile)) {
			c.Path = d
			return c
		}
	}
	c.Err = fmt.Sprintf("%s not found (set %s to the CUDA toolkit's include folder)", HeaderFile, EnvInclude)
	return c
}

// mappedPath finds the file a library loaded by name came from, by reading
// this process's memory map.
func mappedPath(prefix string) string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		p := fields[len(fields)-1]
		if strings.HasPrefix(filepath.Base(p), prefix) {
			return p
		}
	}
	return ""
}

// Discover loads (once per process) the driver, NVRTC and cuBLAS, finds the
// CUDA headers, and reports what it found and where it looked. It never
// fails: what is missing says so in its Component.
func Discover() Discovery {
	var d Discovery
	derr := loadDriver()
	d.Driver = driverLib.comp
	if derr != nil && d.Driver.Err == "" {
		d.Driver.Err = derr.Error()
	}
	if derr == nil {
		d.Driver.Version, _ = DriverVersion()
	}
	n, nerr := LoadNVRTC()
	d.NVRTC = nvrtcComp
	if nerr != nil && d.NVRTC.Err == "" {
		d.NVRTC.Err = nerr.Error()
	}
	libDir := ""
	if n != nil {
		libDir = filepath.Dir(n.Path())
	}
	cerr := loadCUBLAS()
	d.CUBLAS = cublasComp
	if cerr != nil && d.CUBLAS.Err == "" {
		d.CUBLAS.Err = cerr.Error()
	}
	d.Headers = locateHeaders(realEnv(), libDir)
	return d
}
