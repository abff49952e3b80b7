package jsonpos

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestPosition(t *testing.T) {
	b := []byte("ab\ncde\n\nf")
	for _, tc := range []struct {
		off       int64
		line, col int
	}{{0, 1, 1}, {1, 1, 2}, {2, 1, 3}, {3, 2, 1}, {5, 2, 3}, {7, 3, 1}, {8, 4, 1}, {100, 4, 2}, {-3, 1, 1}} {
		if l, c := Position(b, tc.off); l != tc.line || c != tc.col {
			t.Errorf("Position(%d) = %d:%d, want %d:%d", tc.off, l, c, tc.line, tc.col)
		}
	}
}

func TestError(t *testing.T) {
	var v struct{ N int }
	b := []byte("{\n  \"N\": \"x\"\n}")
	err := Error(b, 0, json.Unmarshal(b, &v))
	if err == nil || err.Error() != "line 2, column 10: field N: expected an integer, found string" {
		t.Errorf("type error: %v", err)
	}
	b = []byte("{\"N\": 1")
	if err := Error(b, 4, json.Unmarshal(b, &v)); err == nil || !strings.HasPrefix(err.Error(), "line 5, column 8: unexpected end of input") {
		t.Errorf("truncated at line 5: %v", err)
	}
	b = []byte("{\"N\" 1}")
	if err := Error(b, 0, json.Unmarshal(b, &v)); err == nil || !strings.HasPrefix(err.Error(), "line 1, column 6: invalid character") {
		t.Errorf("syntax error: %v", err)
	}
}

func TestNullElement(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{`[[1,null]]`, 4},
		{`[null]`, 1},
		{"[1,\n  null]", 6},
		{`{"a":null,"b":[1,2]}`, -1},
		{`{"s":"[null", "x":[1]}`, -1},
		{`{"s":"a\"[,null", "ids":[3, null]}`, 28},
		{`[1, 2, 3]`, -1},
	} {
		if got := NullElement([]byte(tc.in)); got != tc.want {
			t.Errorf("NullElement(%s) = %d, want %d", tc.in, got, tc.want)
		}
	}
	if err := NullError([]byte("[1,\n null]"), 0, "a number"); err == nil || err.Error() != "line 2, column 2: null where a number belongs" {
		t.Errorf("NullError: %v", err)
	}
}

func TestDuplicateKey(t *testing.T) {
	for _, tc := range []struct {
		in         string
		path       string
		first, dup int64
	}{
		{`{"a":1,"a":2}`, "a", 1, 7},
		{"{\n  \"n\": 128,\n  \"n\": 64\n}", "n", 4, 16},
		// Nested objects and arrays name their path.
		{`{"rope":{"f":1,"t":"x","f":2}}`, "rope.f", 9, 23},
		{`{"l":[1,{"a":1},{"b":[],"b":{}}]}`, "l[2].b", 17, 24},
		{`[{"a":1},{"a":2,"c":3,"c":4}]`, "[1].c", 16, 22},
		// Keys compare unescaped: "\u0061" is "a".
		{`{"a":1,"\u0061":2}`, "a", 1, 7},
		// The same key in sibling or nested objects, or as a value, is fine.
		{`{"a":{"a":1},"b":{"a":2},"c":[{"a":3},{"a":4}]}`, "", -1, -1},
		{`{"k":"k","s":"\"k\":1,\"k\"","x":"\\"}`, "", -1, -1},
		{`{"a\"":1,"a":2,"a\\":3}`, "", -1, -1},
		{`{}`, "", -1, -1},
		{`[1, "a", null, {}]`, "", -1, -1},
		{`3`, "", -1, -1},
	} {
		path, first, dup := DuplicateKey([]byte(tc.in))
		if path != tc.path || first != tc.first || dup != tc.dup {
			t.Errorf("DuplicateKey(%s) = %q %d %d, want %q %d %d", tc.in, path, first, dup, tc.path, tc.first, tc.dup)
		}
	}
}
