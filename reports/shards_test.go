package reports

import "testing"

func TestSweepOf(t *testing.T) {
	base := "mstar bench moe --batch 1,4 --model m"
	for _, tc := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"mstar", "bench", "moe", "--batch", "1,4", "--shard", "2/3", "--model", "m"}, base},
		{[]string{"mstar", "bench", "moe", "--shard=2/3", "--batch", "1,4", "-o", "x.json", "--model", "m", "--device", "cuda:1"}, base},
		{[]string{"mstar", "bench", "moe", "--batch", "1,4", "-ox.json", "--out=y.json", "--model", "m"}, base},
		{[]string{"mstar", "bench", "moe", "--batch", "1,4", "--model", "m", "--dir", "/tmp/a", "--dump-dir", "d"}, base},
		{[]string{"mstar", "bench", "moe", "--devices", "all", "--replicate", "--batch", "1,4", "--model", "m"}, base},
		// What changes the cells stays.
		{[]string{"mstar", "bench", "moe", "--batch", "1,4", "--model", "m", "--seed", "2"}, base + " --seed 2"},
	} {
		if got := SweepOf(tc.cmd); got != tc.want {
			t.Errorf("SweepOf(%q) = %q, want %q", tc.cmd, got, tc.want)
		}
	}
}
