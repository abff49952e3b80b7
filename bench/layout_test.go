package bench_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The fused-MoE layer is sequenced in one place, kernels/moe's Runner: bench
// moe and ablate router both construct one, and no suite or command calls
// the steps it wraps (compile, upload, plan, enqueue, time, CPU forward).
func TestSuitesRunMoEThroughTheRunner(t *testing.T) {
	steps := []string{"CompileKernels", "UploadWeights", "NewPlan", "SetInputs", "Poison", "Enqueue",
		"TimeGraph", "TimeStages", "ForwardCPU", "ForwardCPUTimed"}
	usesRunner := map[string]bool{}
	for _, dir := range []string{".", "moe", "ablate", "ceilings", "sweep", "stress", "spill", "../cmd/mstar"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			moeName := ""
			for _, imp := range file.Imports {
				if imp.Path.Value == `"github.com/mstar-dev/mstar/kernels/moe"` {
					moeName = "moe"
					if imp.Name != nil {
						moeName = imp.Name.Name
					}
				}
			}
			if moeName == "" {
				continue
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == moeName && sel.Sel.Name == "NewRunner" {
					usesRunner[dir] = true
				}
				if slices.Contains(steps, sel.Sel.Name) {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "bench" {
						return true // the harness's own TimeGraph
					}
					t.Errorf("%s calls %s: run the layer through moe.Runner", f, sel.Sel.Name)
				}
				return true
			})
		}
	}
	for _, suite := range []string{"moe", "ablate"} {
		if !usesRunner[suite] {
			t.Errorf("bench/%s does not construct a moe.Runner", suite)
		}
	}
}
