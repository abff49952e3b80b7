package main

import (
	"bytes"
	"strings"
	"testing"
)

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// /dev/zero, as a file or as an endless stdin, to every reader of the CLI:
// a one-line refusal with exit 2, not a process that grows until it dies.
func TestReadersRefuseDevZero(t *testing.T) {
	for _, args := range [][]string{
		{"report", "show", "/dev/zero"},
		{"report", "show", "-"},
		{"trace", "summarize", "/dev/zero"},
		{"ablate", "router", "--trace", "/dev/zero"},
		{"route", "--router", "softmax-topk", "--topk", "2", "--logits", "/dev/zero"},
		{"route", "--router", "softmax-topk", "--topk", "2", "--logits", "-"},
	} {
		var out, errb bytes.Buffer
		code := run(args, zeroReader{}, &out, &errb)
		msg := strings.TrimSpace(errb.String())
		if code != exitBadInput || strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "NUL") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line saying why", args, code, msg)
		}
	}
}

// A logit outside float32 is refused where it is read, naming its place.
func TestRouteLogitOutsideFloat32(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"route", "--router", "softmax-topk", "--topk", "2", "--logits", "-"}, strings.NewReader("[[1,2,1e39,0]]"), &out, &errb)
	if code != exitBadInput || !strings.Contains(errb.String(), "row 0, column 2: 1e+39 is outside float32's range") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}
