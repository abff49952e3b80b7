package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/mstar-dev/mstar/internal/sigstack"
)

// library is a loaded shared library, or why it could not be loaded.
type library struct {
	handle uintptr
	comp   Component
	err    error
}

// loadLibrary finds and dlopens a library as spec says. The returned
// library always carries its Component (what was searched), and err when
// loading failed.
func loadLibrary(spec libSpec, e sysEnv) *library {
	l := &library{comp: Component{Name: spec.name, EnvVar: spec.env}}
	cands, searched, overrideErr := spec.locate(e)
	l.comp.Searched = searched
	if overrideErr != "" {
		l.comp.Err = overrideErr
		l.err = errors.New(overrideErr)
		return l
	}
	var failures []string
	for _, c := range cands {
		if !c.byName {
			// Libraries that ship beside it (cuBLASLt beside cuBLAS) load
			// from the same folder first, so a wheel or toolkit folder that
			// is not on the loader's path still works.
			preloadSiblings(c.path)
		}
		h, err := purego.Dlopen(c.path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			if !c.byName {
				failures = append(failures, fmt.Sprintf("%s: %v", c.path, err))
			}
			continue
		}
		l.handle = h
		l.comp.Path = c.path
		// A library's constructors may install signal handlers; a Ctrl-C
		// must not crash Go through them.
		sigstack.Fix()
		if c.byName {
			if p := mappedPath(strings.SplitN(c.path, ".so", 2)[0] + ".so"); p != "" {
				l.comp.Path = p
			}
		}
		return l
	}
	l.err = &NotFoundError{Names: spec.byName, Searched: searched}
	if len(failures) > 0 {
		l.err = fmt.Errorf("%s found but failed to load: %s", spec.name, strings.Join(failures, "; "))
	}
	l.comp.Err = l.err.Error()
	return l
}

// NotFoundError is a library that is nowhere mstar looked.
type NotFoundError struct {
	Names    []string // the file names tried ("libcuda.so.1")
	Searched []string // where, in order
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s not found (searched %s)", strings.Join(e.Names, " or "), strings.Join(e.Searched, ", "))
}

// Short is the error without the places searched, which run long.
func (e *NotFoundError) Short() string { return strings.Join(e.Names, " or ") + " not found" }

// preloadSiblings loads cuBLASLt from beside cuBLAS; other libraries have
// no siblings they need.
func preloadSiblings(path string) {
	base := filepath.Base(path)
	if !strings.HasPrefix(base, "libcublas.so") {
		return
	}
	lt := filepath.Join(filepath.Dir(path), strings.Replace(base, "libcublas", "libcublasLt", 1))
	if _, err := os.Stat(lt); err == nil {
		purego.Dlopen(lt, purego.RTLD_NOW|purego.RTLD_GLOBAL) // best effort: cuBLAS's own load reports a failure
	}
}

// binder binds C functions of one library to Go function variables,
// remembering the first missing symbol instead of panicking as
// purego.RegisterLibFunc does.
type binder struct {
	lib  string
	h    uintptr
	errs []string
}

// bind sets *fptr to the first of names the library exports.
func (b *binder) bind(fptr any, names ...string) {
	if !b.try(fptr, names...) {
		b.errs = append(b.errs, names[0])
	}
}

// try is bind for optional symbols: it reports whether one was found.
func (b *binder) try(fptr any, names ...string) bool {
	for _, n := range names {
		sym, err := purego.Dlsym(b.h, n)
		if err == nil && sym != 0 {
			purego.RegisterFunc(fptr, sym)
			return true
		}
	}
	return false
}

func (b *binder) err() error {
	if len(b.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s lacks %s (too old?)", b.lib, strings.Join(b.errs, ", "))
}

// goString copies a NUL-terminated C string.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cString returns s as a NUL-terminated byte slice.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
