package spill

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/mstar-dev/mstar/bench/spill/tier"
	"github.com/mstar-dev/mstar/internal/gpu"
)

const holderEnv = "MSTAR_SPILL_TEST_HOLDER"

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) == "1" {
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		if err := tier.HolderMain(args, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func testConfig(t *testing.T) Config {
	return Config{Dev: gpu.NewCPU(), ShmDir: t.TempDir(),
		Holder: tier.Holder{Argv: []string{os.Args[0], "-test.run=^$", "--"}, Env: []string{holderEnv + "=1"}}}
}

func TestAllCellsDebug(t *testing.T) {
	cfg := testConfig(t)
	cells := Cells(Scenarios, tier.Kinds, []int64{16 << 20})
	m, err := Run(context.Background(), cfg, cells, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range m.Outcomes {
		t.Logf("%-32s %-6v %8s %s %v", o.Cell.Name(), o.Passed(), o.Took.Round(1e6), o.Figure, o.Failures())
	}
	f, _ := os.Create("/tmp/matrix.txt")
	m.WriteText(f)
	f.Close()
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
