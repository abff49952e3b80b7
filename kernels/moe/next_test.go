package moe

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// nextPatches are kernels/moe/next's patches in the order they apply
// (the order to give next/build.sh).
var nextPatches = []string{"gv-candidates.patch", "wg-mn-spill.patch", "align-rank.patch", "decode-shared.patch", "wg-nc3.patch"}

// The waiting patches still apply, in order, to this tree: a change on
// main that breaks one is found here, not on the GPU machine.
func TestNextPatchesApply(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git to apply the patches with")
	}
	have, _ := filepath.Glob(filepath.Join("next", "*.patch"))
	for _, p := range have {
		if !slices.Contains(nextPatches, filepath.Base(p)) {
			t.Errorf("%s: not in nextPatches: add it there in the order it applies", p)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the files the patches touch; git apply works on plain files.
	dir := t.TempDir()
	touched := regexp.MustCompile(`(?m)^diff --git a/(\S+) b/`)
	for _, name := range nextPatches {
		b, err := os.ReadFile(filepath.Join("next", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range touched.FindAllSubmatch(b, -1) {
			rel := string(m[1])
			src, err := os.ReadFile(filepath.Join(root, rel))
			if err != nil {
				continue // a file the patch creates
			}
			dst := filepath.Join(dir, rel)
			if _, err := os.Stat(dst); err == nil {
				continue
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, src, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range nextPatches {
		abs, _ := filepath.Abs(filepath.Join("next", name))
		cmd := exec.Command(git, "apply", abs)
		cmd.Dir = dir
		// Not inside any repository, wherever the temporary folder is.
		cmd.Env = append(os.Environ(), "GIT_DIR="+filepath.Join(dir, ".nogit"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("next/%s does not apply after %v: %v\n%s", name, nextPatches[:slices.Index(nextPatches, name)], err, out)
		}
	}
}

// The GPU calls' scripts parse, and each one run without a step says how to
// use it and exits 2 before it touches a GPU: a typo found there costs a
// machine start.
func TestNextScriptsParse(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	scripts, _ := filepath.Glob(filepath.Join("next", "*.sh"))
	if len(scripts) == 0 {
		t.Fatal("no next/*.sh")
	}
	for _, s := range scripts {
		if out, err := exec.Command(bash, "-n", s).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", s, err, out)
			continue
		}
		cmd := exec.Command(bash, s)
		cmd.Env = append(os.Environ(), "OUT="+t.TempDir())
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage:") {
			t.Errorf("%s with no step: %v, want exit 2 and a usage line:\n%s", s, err, out)
		}
	}
}
