package results

import (
	"os/exec"
	"strings"
	"testing"
)

// Producers (suites, libraries, the device layer) import the schema, never the
// presentation: package reports and gonum/plot are for cmd/mstar alone.
func TestProducersDoNotDependOnReports(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	const mod = "github.com/mstar-dev/mstar/"
	producers := []string{mod + "bench/...", mod + "arena/...", mod + "kernels/...", mod + "trace",
		mod + "internal/...", mod + "reports/results"}
	args := append([]string{"list", "-deps", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`}, producers...)
	out, err := exec.Command(goBin, args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := f[0]
		if !isProducer(pkg, mod) {
			continue
		}
		checked++
		for _, dep := range f[1:] {
			if dep == mod+"reports" || strings.HasPrefix(dep, "gonum.org/v1/plot") ||
				strings.HasPrefix(dep, "github.com/olekukonko/tablewriter") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d producer packages, want the module's (go list output:\n%s)", checked, out)
	}
}

func isProducer(pkg, mod string) bool {
	rel, ok := strings.CutPrefix(pkg, mod)
	if !ok {
		return false
	}
	for _, p := range []string{"bench", "arena", "kernels", "trace", "internal", "reports/results"} {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}
