package arena

import (
	"strings"
	"testing"
)

func TestParseName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Name
		wantErr string
	}{
		{"segment", "mstar_arena_worker0_1234_0123456789abcdef", Name{KindSegment, "worker0", 1234, "0123456789abcdef"}, ""},
		{"spill", "mstar_spill_p-1_7_ffffffffffffffff", Name{KindSpill, "p-1", 7, "ffffffffffffffff"}, ""},
		{"path traversal", "../etc/passwd", Name{}, "path separator"},
		{"absolute path", "/dev/shm/mstar_arena_w_1_0123456789abcdef", Name{}, "path separator"},
		{"dotdot inside", "mstar_arena_w.._1_0123456789abcdef", Name{}, "path separator"},
		{"other program's file", "sem.foo", Name{}, "does not start with"},
		{"unknown kind", "mstar_tensor_w_1_0123456789abcdef", Name{}, "neither arena nor spill"},
		{"uppercase entity", "mstar_arena_W_1_0123456789abcdef", Name{}, "not one of"},
		{"empty entity", "mstar_arena__1_0123456789abcdef", Name{}, "want 1 to 32"},
		{"entity with underscore", "mstar_arena_a_b_1_0123456789abcdef", Name{}, "want mstar_"},
		{"zero pid", "mstar_arena_w_0_0123456789abcdef", Name{}, "positive decimal"},
		{"signed pid", "mstar_arena_w_+1_0123456789abcdef", Name{}, "positive decimal"},
		{"leading zero pid", "mstar_arena_w_01_0123456789abcdef", Name{}, "positive decimal"},
		{"short token", "mstar_arena_w_1_0123", Name{}, "16 hex"},
		{"uppercase token", "mstar_arena_w_1_0123456789ABCDEF", Name{}, "lowercase hex"},
		{"nul byte", "mstar_arena_w_1_0123456789abcde\x00", Name{}, "path separator"},
		{"too long", "mstar_arena_" + strings.Repeat("a", 200) + "_1_0123456789abcdef", Name{}, "too long"},
	}
	for _, tc := range tests {
		got, err := ParseName(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: ParseName(%q) error = %v, want one containing %q", tc.name, tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: ParseName(%q): %v", tc.name, tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: ParseName(%q) (-want +got):\n-%+v\n+%+v", tc.name, tc.in, tc.want, got)
		}
		if got.String() != tc.in {
			t.Errorf("%s: round trip: %q, want %q", tc.name, got.String(), tc.in)
		}
	}
}

func TestNewTokenUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok := newToken()
		if len(tok) != tokenLen || seen[tok] {
			t.Fatalf("token %q: wrong length or repeated", tok)
		}
		seen[tok] = true
	}
}
