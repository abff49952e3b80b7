package main

import (
	"strings"
	"testing"
)

// Bad input found deep in a suite or library (each once had its own error
// type, or a message prefix cmd tested) reaches the one exit-2 mapping in run
// through %w, with its message intact.
func TestBadInputFromEveryLayerExitsTwo(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bench moe shape", []string{"bench", "moe", "--device", "cpu", "--experts", "8", "--topk", "9", "--hidden", "64", "--inter", "64", "--batch", "1"}, "top-k 9 is larger than the number of experts 8"},
		{"ablate router settings", []string{"ablate", "router", "--device", "cpu", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "64", "--routers", "deepseek-v3", "--n-group", "3", "--layers", "1", "--tokens", "8"}, "bad input"},
		{"arena sweep fit", []string{"arena", "sweep", "--device", "cpu", "--min-size", "1TiB", "--max-size", "1TiB"}, "is free (try a smaller --max-size)"},
		{"arena stress options", []string{"arena", "stress", "--duration", "1s", "--max-size", "64GiB", "--segment-size", "64GiB"}, "stress: --max-size 64 GiB over 4 producers"},
		{"spill pool layout", []string{"spill-matrix", "--device", "cpu", "--cells", "hibernate/pageable", "--sizes", "64", "--blocks", "16"}, "too small for the layout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runMstar(t, tt.args...)
			if code != exitBadInput || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d naming %q", code, stderr, exitBadInput, tt.want)
			}
		})
	}
}
