package routing

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Routing
		want string // "" when valid
	}{
		{"ok with an empty slot", Routing{M: 2, K: 2, IDs: []int32{0, 1, Empty, 3}, Weights: []float32{.5, .5, 0, 1}}, ""},
		{"a token may name an expert twice", Routing{M: 1, K: 2, IDs: []int32{2, 2}, Weights: []float32{.5, .5}}, ""},
		{"sizes", Routing{M: 2, K: 2, IDs: []int32{0}, Weights: []float32{1}}, "holds 1 ids and 1 weights (want 4 each)"},
		{"no slots", Routing{M: 1, K: 0}, "bad size"},
		{"id out of range", Routing{M: 1, K: 2, IDs: []int32{0, 4}, Weights: []float32{.5, .5}}, "token 0 slot 1: expert id 4 out of range [0,4)"},
		{"id below Empty", Routing{M: 1, K: 1, IDs: []int32{-2}, Weights: []float32{1}}, "expert id -2 out of range"},
		{"weight", Routing{M: 1, K: 1, IDs: []int32{0}, Weights: []float32{float32(math.Inf(1))}}, "weight +Inf is not finite"},
		{"mask", Routing{M: 1, K: 1, IDs: []int32{0}, Weights: []float32{1}, Dropped: []bool{}}, "drop mask holds 0 values, want 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate(4)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
	twice := Routing{M: 2, K: 2, IDs: []int32{0, 1, 3, 3}, Weights: make([]float32, 4)}
	if err := twice.Distinct(4); err == nil || !strings.Contains(err.Error(), "token 1: expert 3 chosen twice") {
		t.Errorf("Distinct = %v", err)
	}
	if err := (Routing{M: 2, K: 2, IDs: []int32{0, Empty, Empty, 0}, Weights: make([]float32, 4)}).Distinct(4); err != nil {
		t.Errorf("empty slots and the same expert on two tokens are distinct: %v", err)
	}
}

// A dropped slot names its expert but computes nothing: every count and
// the kernels' view (Computed) leave it out.
func TestDroppedSlots(t *testing.T) {
	r := Routing{M: 3, K: 2, IDs: []int32{0, 1, 2, Empty, 1, 2}, Weights: []float32{.5, 0, 1, 0, .5, .5},
		Dropped: []bool{false, true, false, false, false, false}}
	if got := r.Loads(3); !reflect.DeepEqual(got, []int{1, 1, 2}) {
		t.Errorf("Loads = %v, want [1 1 2]", got)
	}
	if r.Slots() != 4 || r.Touched(3) != 3 || r.DroppedSlots() != 1 || r.TokenDrops() != 0 {
		t.Errorf("slots %d touched %d dropped %d token drops %d, want 4 3 1 0", r.Slots(), r.Touched(3), r.DroppedSlots(), r.TokenDrops())
	}
	c := r.Computed()
	if want := []int32{0, Empty, 2, Empty, 1, 2}; !reflect.DeepEqual(c.IDs, want) || c.Dropped != nil {
		t.Errorf("Computed ids %v mask %v, want %v and no mask", c.IDs, c.Dropped, want)
	}
	part := r.Tokens(1, 2).Computed()
	if want := []int32{2, Empty, 1, 2}; !reflect.DeepEqual(part.IDs, want) || part.M != 2 {
		t.Errorf("tokens 1..2: %v (M=%d), want %v", part.IDs, part.M, want)
	}
	if ids, ws := r.Row(0); !reflect.DeepEqual(ids, []int32{0}) || !reflect.DeepEqual(ws, []float32{.5}) {
		t.Errorf("Row(0) = %v %v, want the live slot only", ids, ws)
	}
	// Localize keeps what computes: the dropped slot is not this rank's.
	l := r.Localize(4, 2, 0)
	if want := []int32{0, Empty, Empty, Empty, 1, Empty}; !reflect.DeepEqual(l.IDs, want) {
		t.Errorf("Localize rank 0 of 2: %v, want %v", l.IDs, want)
	}
}

func TestConcatAndRepeat(t *testing.T) {
	a := Routing{M: 1, K: 1, IDs: []int32{3}, Weights: []float32{1}}
	b := Routing{M: 2, K: 2, IDs: []int32{0, 1, 2, -1}, Weights: []float32{.5, .5, 1, 0}, Dropped: []bool{false, true, false, false}}
	c := Concat([]Routing{a, b})
	want := Routing{M: 3, K: 2, IDs: []int32{3, -1, 0, 1, 2, -1}, Weights: []float32{1, 0, .5, .5, 1, 0},
		Dropped: []bool{false, false, false, true, false, false}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Concat (-want +got):\n-%+v\n+%+v", want, c)
	}
	rep := b.Repeat(3)
	if wantIDs := []int32{0, 1, 2, -1, 0, 1}; !reflect.DeepEqual(rep.IDs, wantIDs) || !reflect.DeepEqual(rep.Dropped, []bool{false, true, false, false, false, true}) {
		t.Errorf("Repeat(3): ids %v mask %v", rep.IDs, rep.Dropped)
	}
}
