package sweep

import (
	"fmt"
	"testing"
)

func TestCountWrong(t *testing.T) {
	for _, size := range []int64{4096, 1 << 20, 8 << 20, 24<<20 + 4096} {
		for _, reps := range []int{1, 3} {
			t.Run(fmt.Sprintf("%d×%d", reps, size), func(t *testing.T) {
				want := make([]byte, int64(reps)*size)
				for i := range want {
					want[i] = byte(i*7 + 1)
				}
				got := append([]byte(nil), want...)
				if n := countWrong(got, want, size); n != 0 {
					t.Fatalf("identical copies: %d wrong", n)
				}
				// One byte off at the end of the last copy, and (with several
				// copies) two bytes in the first: two copies wrong, counted once each.
				got[len(got)-1]++
				if reps > 1 {
					got[0]++
					got[size/2]++
				}
				wantWrong := min(reps, 2)
				if n := countWrong(got, want, size); n != wantWrong {
					t.Errorf("%d wrong, want %d", n, wantWrong)
				}
				clearAll(got)
				for i, b := range got {
					if b != 0 {
						t.Fatalf("clearAll left byte %d = %d", i, b)
					}
				}
			})
		}
	}
}
