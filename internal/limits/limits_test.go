package limits

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

func TestReaderRefusesBinaryAndEndlessInput(t *testing.T) {
	if _, err := io.ReadAll(&Reader{R: zeros{}, Limit: 1 << 20, Text: true}); !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), "first byte is NUL") {
		t.Errorf("zeros: %v, want ErrBinary at byte 1", err)
	}
	if b, err := io.ReadAll(&Reader{R: strings.NewReader("{\x00\x00}"), Limit: 1 << 20, Text: true}); err != nil || len(b) != 4 {
		t.Errorf("NULs after the start are the parser's to judge: %q, %v", b, err)
	}
	b, err := io.ReadAll(&Reader{R: endless{}, Limit: 1 << 20})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), EnvMaxInput) {
		t.Errorf("endless: %v, want ErrTooLarge naming %s", err, EnvMaxInput)
	}
	if len(b) > 1<<20 {
		t.Errorf("endless: read %d bytes past the 1 MiB limit", len(b))
	}
	b, err = io.ReadAll(&Reader{R: strings.NewReader("hello"), Limit: 5, Text: true})
	if err != nil || string(b) != "hello" {
		t.Errorf("exactly at the limit: %q, %v", b, err)
	}
}

func TestMaxInputFromEnv(t *testing.T) {
	t.Setenv(EnvMaxInput, "")
	if n, err := MaxInput(); err != nil || n != DefaultMaxInput {
		t.Errorf("default: %d, %v", n, err)
	}
	t.Setenv(EnvMaxInput, "4KiB")
	if n, err := MaxInput(); err != nil || n != 4096 {
		t.Errorf("4KiB: %d, %v", n, err)
	}
	p := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(p, bytes.Repeat([]byte("a"), 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p, true); !errors.Is(err, ErrTooLarge) {
		t.Errorf("5000-byte file under a 4 KiB limit: %v", err)
	}
	t.Setenv(EnvMaxInput, "lots")
	if _, err := MaxInput(); err == nil || !strings.Contains(err.Error(), EnvMaxInput) {
		t.Errorf("bad value: %v", err)
	}
}
