package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSystem builds a file tree under a temp root and returns an
// environment that sees only it and vars.
func fakeSystem(t *testing.T, files []string, vars map[string]string) (sysEnv, string) {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := realEnv()
	e.root = root
	e.getenv = func(k string) string {
		v := vars[k]
		return strings.ReplaceAll(v, "$ROOT", root)
	}
	return e, root
}

func TestLocateLibraries(t *testing.T) {
	tests := []struct {
		name  string
		spec  libSpec
		files []string
		vars  map[string]string
		want  string // first candidate, relative to the root; "" when none is a file
		why   string
	}{
		{
			name:  "cuda home first",
			spec:  nvrtcSpec,
			files: []string{"home/cuda/lib64/libnvrtc.so.13", "usr/local/cuda/lib64/libnvrtc.so.13"},
			vars:  map[string]string{"CUDA_HOME": "$ROOT/home/cuda"},
			want:  "home/cuda/lib64/libnvrtc.so.13",
			why:   "CUDA_HOME comes before /usr/local/cuda",
		},
		{
			name:  "newest versioned toolkit",
			spec:  nvrtcSpec,
			files: []string{"usr/local/cuda-12.4/targets/x86_64-linux/lib/libnvrtc.so.12", "usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13", "usr/local/cuda-9.2/lib64/libnvrtc.so"},
			want:  "usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13",
			why:   "cuda-13.0 sorts before cuda-12.4 and cuda-9.2 (numerically, not as strings)",
		},
		{
			name:  "so.13 before so.12 in one folder",
			spec:  nvrtcSpec,
			files: []string{"usr/local/cuda/lib64/libnvrtc.so.12", "usr/local/cuda/lib64/libnvrtc.so.13"},
			want:  "usr/local/cuda/lib64/libnvrtc.so.13",
		},
		{
			name:  "python wheel",
			spec:  nvrtcSpec,
			files: []string{"opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13"},
			want:  "opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
			why:   "the H200 machine's venv layout",
		},
		{
			name:  "cublas wheel of its own",
			spec:  cublasSpec,
			files: []string{"venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12"},
			vars:  map[string]string{"VIRTUAL_ENV": "$ROOT/venv"},
			want:  "venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12",
		},
		{
			name:  "override file wins",
			spec:  nvrtcSpec,
			files: []string{"usr/local/cuda/lib64/libnvrtc.so.13", "mine/libnvrtc.so.12"},
			vars:  map[string]string{EnvNVRTC: "$ROOT/mine/libnvrtc.so.12"},
			want:  "mine/libnvrtc.so.12",
		},
		{
			name:  "override folder",
			spec:  cublasSpec,
			files: []string{"mine/libcublas.so.13"},
			vars:  map[string]string{EnvCUBLAS: "$ROOT/mine"},
			want:  "mine/libcublas.so.13",
		},
		{
			name: "nothing on disk: loader names only",
			spec: nvrtcSpec,
			want: "",
		},
		{
			name:  "driver by name before folders",
			spec:  driverSpec,
			files: []string{"usr/local/nvidia/lib64/libcuda.so.1"},
			want:  "",
			why:   "libcuda loads by name first; the folder comes after",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, root := fakeSystem(t, tt.files, tt.vars)
			cands, searched, oerr := tt.spec.locate(e)
			if oerr != "" {
				t.Fatalf("override error %q", oerr)
			}
			if len(cands) == 0 {
				t.Fatal("no candidates at all")
			}
			got := ""
			if !cands[0].byName {
				got, _ = filepath.Rel(root, cands[0].path)
			}
			if got != tt.want {
				t.Errorf("first candidate = %q, want %q (%s); all: %v", got, tt.want, tt.why, cands)
			}
			if !strings.HasPrefix(searched[0], tt.spec.env) {
				t.Errorf("searched[0] = %q, want the override variable %s first", searched[0], tt.spec.env)
			}
		})
	}
}

func TestLocateOverrideMissing(t *testing.T) {
	e, _ := fakeSystem(t, []string{"usr/local/cuda/lib64/libnvrtc.so.13"}, map[string]string{EnvNVRTC: "$ROOT/nope"})
	cands, _, oerr := nvrtcSpec.locate(e)
	if len(cands) != 0 {
		t.Errorf("a wrong override fell back to %v; it must fail instead", cands)
	}
	if !strings.Contains(oerr, EnvNVRTC) || !strings.Contains(oerr, "nope") {
		t.Errorf("override error %q does not name the variable and its value", oerr)
	}
}

func TestLoadLibraryNotFound(t *testing.T) {
	e, _ := fakeSystem(t, nil, nil)
	spec := nvrtcSpec
	spec.byName = []string{"libmstar-does-not-exist.so.1"}
	l := loadLibrary(spec, e)
	if l.err == nil {
		t.Fatal("loading a library that is nowhere succeeded")
	}
	msg := l.err.Error()
	for _, want := range []string{"libmstar-does-not-exist.so.1", "not found", "searched", EnvNVRTC + " (unset)", "usr/local/cuda/lib64"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if l.comp.Path != "" || l.comp.Err == "" || len(l.comp.Searched) < 3 {
		t.Errorf("component = %+v, want no path, an error and the places searched", l.comp)
	}
}

func TestLoadLibraryBroken(t *testing.T) {
	// An empty file where the library should be: found, but dlopen fails.
	e, _ := fakeSystem(t, []string{"usr/local/cuda/lib64/libnvrtc.so.13"}, nil)
	spec := nvrtcSpec
	spec.byName = []string{"libmstar-does-not-exist.so.1"}
	l := loadLibrary(spec, e)
	if l.err == nil {
		t.Fatal("dlopen of an empty file succeeded")
	}
	if !strings.Contains(l.err.Error(), "failed to load") || !strings.Contains(l.err.Error(), "libnvrtc.so.13") {
		t.Errorf("error %q should say the file was found but failed to load", l.err)
	}
}

func TestLocateHeaders(t *testing.T) {
	tests := []struct {
		name   string
		files  []string
		vars   map[string]string
		libDir string
		want   string
	}{
		{
			name:   "next to the library (targets layout)",
			files:  []string{"usr/local/cuda-13.0/targets/x86_64-linux/include/cuda_bf16.h", "usr/local/cuda/include/cuda_bf16.h"},
			libDir: "usr/local/cuda-13.0/targets/x86_64-linux/lib",
			want:   "usr/local/cuda-13.0/targets/x86_64-linux/include",
		},
		{
			name:   "next to the library (lib64 layout)",
			files:  []string{"opt/cuda/include/cuda_bf16.h"},
			libDir: "opt/cuda/lib64",
			want:   "opt/cuda/include",
		},
		{
			name:  "cuda home",
			files: []string{"tk/include/cuda_bf16.h", "usr/local/cuda/include/cuda_bf16.h"},
			vars:  map[string]string{"CUDA_HOME": "$ROOT/tk"},
			want:  "tk/include",
		},
		{
			name:  "usr local cuda",
			files: []string{"usr/local/cuda/include/cuda_bf16.h"},
			want:  "usr/local/cuda/include",
		},
		{
			name:  "python wheel",
			files: []string{"opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/include/cuda_bf16.h"},
			want:  "opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/include",
		},
		{
			name:  "override",
			files: []string{"mine/cuda_bf16.h", "usr/local/cuda/include/cuda_bf16.h"},
			vars:  map[string]string{EnvInclude: "$ROOT/mine"},
			want:  "mine",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, root := fakeSystem(t, tt.files, tt.vars)
			libDir := ""
			if tt.libDir != "" {
				libDir = filepath.Join(root, tt.libDir)
			}
			c := locateHeaders(e, libDir)
			if c.Err != "" {
				t.Fatalf("headers not found: %s; searched %v", c.Err, c.Searched)
			}
			if got, _ := filepath.Rel(root, c.Path); got != tt.want {
				t.Errorf("found %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLocateHeadersMissingSaysWhere(t *testing.T) {
	e, root := fakeSystem(t, nil, map[string]string{"CUDA_HOME": "$ROOT/tk"})
	c := locateHeaders(e, "")
	if c.Path != "" || !strings.Contains(c.Err, HeaderFile) || !strings.Contains(c.Err, EnvInclude) {
		t.Fatalf("component = %+v, want not found, naming %s and %s", c, HeaderFile, EnvInclude)
	}
	joined := strings.Join(c.Searched, "\n")
	for _, want := range []string{filepath.Join(root, "tk/include"), filepath.Join(root, "usr/local/cuda/include")} {
		if !strings.Contains(joined, want) {
			t.Errorf("searched list lacks %s:\n%s", want, joined)
		}
	}

	e, _ = fakeSystem(t, nil, map[string]string{EnvInclude: "/nowhere"})
	c = locateHeaders(e, "")
	if !strings.Contains(c.Err, EnvInclude+"=/nowhere") {
		t.Errorf("a wrong override should be named: %q", c.Err)
	}
}

func TestVersionOrder(t *testing.T) {
	tests := []struct{ a, b string }{
		{"/usr/local/cuda-9.2", "/usr/local/cuda-12.4"},
		{"/usr/local/cuda-12.4", "/usr/local/cuda-12.10"},
		{"/usr/local/cuda-12", "/usr/local/cuda-12.1"},
		{"/usr/local/cuda-12.8", "/usr/local/cuda-13.0"},
	}
	for _, tt := range tests {
		if !versionLess(tt.a, tt.b) || versionLess(tt.b, tt.a) {
			t.Errorf("want %s < %s", tt.a, tt.b)
		}
	}
}

func TestDiscoverReportsEverything(t *testing.T) {
	d := Discover()
	names := map[string]bool{}
	for _, c := range d.Components() {
		t.Logf("%s: path %q version %q err %q (override %s)\n\tsearched %s", c.Name, c.Path, c.Version, c.Err, c.EnvVar, strings.Join(c.Searched, ", "))
		names[c.Name] = true
		if c.EnvVar == "" {
			t.Errorf("%s: no override variable", c.Name)
		}
		if len(c.Searched) == 0 {
			t.Errorf("%s: no places searched", c.Name)
		}
		if c.Path == "" && c.Err == "" {
			t.Errorf("%s: neither found nor a reason it was not", c.Name)
		}
	}
	for _, n := range []string{"libcuda", "NVRTC", "cuBLAS", "CUDA headers"} {
		if !names[n] {
			t.Errorf("Discover lacks %s", n)
		}
	}
}
