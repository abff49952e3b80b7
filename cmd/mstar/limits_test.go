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
		if code != exitBadUsge || strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "NUL") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line saying why", args, code, msg)
		}
	}
}
