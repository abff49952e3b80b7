package reports

import (
	"strings"
	"testing"
)

// A run stopped before its first batch has no result to name its shape:
// the header says so and gives the command, not blank fields.
func TestMoETableNoBatch(t *testing.T) {
	d := &Document{Suite: "bench moe", Command: []string{"mstar", "bench", "moe", "--batch", "1000000"}, Env: Env{"backend": "cpu"}}
	var b strings.Builder
	if err := moeTable(&b, d); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "no batch finished (mstar bench moe --batch 1000000)") || strings.Contains(out, "local shape E k") {
		t.Errorf("header:\n%s", out)
	}
}
