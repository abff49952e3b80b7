package cuda

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var testKey = CacheKey{
	Source:   `extern "C" __global__ void k(float* x) { x[threadIdx.x] += 1; }`,
	Name:     "k.cu",
	Arch:     "sm_90a",
	Options:  []string{"--gpu-architecture=sm_90a", "-DTILE=64"},
	Compiler: "nvrtc 13.0 cubin",
}

// payload is a self-describing image: a tag and bytes derived from it, so a
// reader can tell a whole payload from a torn or mixed one.
func payload(tag string, n int) []byte {
	b := []byte(tag + "\n")
	seed := sha256.Sum256([]byte(tag))
	for len(b) < n {
		seed = sha256.Sum256(seed[:])
		b = append(b, seed[:]...)
	}
	return b[:n]
}

func validPayload(b []byte) error {
	tag, _, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return fmt.Errorf("no tag")
	}
	if want := payload(string(tag), len(b)); !bytes.Equal(b, want) {
		return fmt.Errorf("payload %q is not whole", tag)
	}
	return nil
}

func TestCacheKeyChanges(t *testing.T) {
	base := testKey.Hash()
	mods := []struct {
		name string
		mod  func(k *CacheKey)
	}{
		{"source", func(k *CacheKey) { k.Source += " " }},
		{"arch", func(k *CacheKey) { k.Arch = "sm_100a" }},
		{"option value", func(k *CacheKey) { k.Options = []string{"--gpu-architecture=sm_90a", "-DTILE=128"} }},
		{"option added", func(k *CacheKey) { k.Options = append(append([]string{}, k.Options...), "-lineinfo") }},
		{"options order", func(k *CacheKey) { k.Options = []string{"-DTILE=64", "--gpu-architecture=sm_90a"} }},
		{"nvrtc version", func(k *CacheKey) { k.Compiler = "nvrtc 13.1 cubin" }},
		{"output kind", func(k *CacheKey) { k.Compiler = "nvrtc 13.0 ptx" }},
		{"name", func(k *CacheKey) { k.Name = "other.cu" }},
		// Length prefixes: moving a byte between fields is a different key.
		{"field boundary", func(k *CacheKey) { k.Options = []string{"--gpu-architecture=sm_90a-DTILE=64"} }},
	}
	seen := map[string]string{base: "base"}
	for _, m := range mods {
		k := testKey
		k.Options = append([]string{}, testKey.Options...)
		m.mod(&k)
		h := k.Hash()
		if prev, dup := seen[h]; dup {
			t.Errorf("changing %s gives the same key as %s", m.name, prev)
		}
		seen[h] = m.name
	}
	if testKey.Hash() != base {
		t.Error("Hash is not deterministic")
	}
}

func TestCachePutGet(t *testing.T) {
	c := &Cache{Dir: filepath.Join(t.TempDir(), "a", "b")} // created on demand
	if _, hit, err := c.Get(testKey); hit || err != nil {
		t.Fatalf("empty cache: hit %v err %v", hit, err)
	}
	img := payload("img", 5000)
	if err := c.Put(testKey, img); err != nil {
		t.Fatal(err)
	}
	got, hit, err := c.Get(testKey)
	if err != nil || !hit || !bytes.Equal(got, img) {
		t.Fatalf("Get after Put: hit %v err %v, equal %v", hit, err, bytes.Equal(got, img))
	}
	// No temp files left behind.
	m, _ := filepath.Glob(filepath.Join(c.Dir, ".tmp-*"))
	if len(m) != 0 {
		t.Errorf("temp files left: %v", m)
	}
}

func TestCacheRejectsDamagedFiles(t *testing.T) {
	img := payload("good", 3000)
	whole := encodeEntry(testKey.Hash(), img)
	other := testKey
	other.Arch = "sm_80"
	tests := []struct {
		name string
		data []byte
		want string // in the error
	}{
		{"truncated image (torn write)", whole[:len(whole)-100], "torn write"},
		{"truncated header", whole[:20], "no header"},
		{"empty file", nil, "no header"},
		{"flipped byte", flip(whole, len(whole)-1), "checksum"},
		{"wrong key", encodeEntry(other.Hash(), img), "holds key"},
		{"not a cache file", []byte("\x7fELF\n\nbinary"), "bad header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Cache{Dir: t.TempDir()}
			if err := os.WriteFile(c.Path(testKey), tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, hit, err := c.Get(testKey); hit || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Get: hit %v, err %v; want a miss whose error says %q", hit, err, tt.want)
			}
			// GetOrCompile recompiles, warns, and repairs the entry.
			calls := 0
			got, hit, warn, err := c.GetOrCompile(testKey, func() ([]byte, error) { calls++; return img, nil })
			if err != nil || hit || calls != 1 || !bytes.Equal(got, img) {
				t.Fatalf("GetOrCompile: hit %v calls %d err %v", hit, calls, err)
			}
			if warn == nil {
				t.Error("no warning about the damaged entry")
			}
			if _, hit, err := c.Get(testKey); !hit || err != nil {
				t.Errorf("entry not repaired: hit %v err %v", hit, err)
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte{}, b...)
	c[i] ^= 0x40
	return c
}

func TestCacheGetOrCompileHitSkipsCompile(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	calls := 0
	compile := func() ([]byte, error) { calls++; return payload("x", 100), nil }
	if _, hit, _, err := c.GetOrCompile(testKey, compile); hit || err != nil {
		t.Fatalf("first: hit %v err %v", hit, err)
	}
	if _, hit, _, err := c.GetOrCompile(testKey, compile); !hit || err != nil {
		t.Fatalf("second: hit %v err %v", hit, err)
	}
	if calls != 1 {
		t.Errorf("compiled %d times, want 1", calls)
	}
	boom := errors.New("syntax error")
	k := testKey
	k.Source = "broken"
	if _, _, _, err := c.GetOrCompile(k, func() ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("compile error lost: %v", err)
	}
	if _, hit, _ := c.Get(k); hit {
		t.Error("a failed compile was cached")
	}
}

func TestCacheUnwritableStillCompiles(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	c := &Cache{Dir: filepath.Join(f, "sub")} // a folder under a file cannot exist
	img, hit, warn, err := c.GetOrCompile(testKey, func() ([]byte, error) { return []byte("img"), nil })
	if err != nil || hit || string(img) != "img" {
		t.Fatalf("img %q hit %v err %v", img, hit, err)
	}
	if warn == nil {
		t.Error("no warning that the cache could not be written")
	}
}

func TestCacheSweepsStaleTemps(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	stale := filepath.Join(c.Dir, ".tmp-dead-123")
	fresh := filepath.Join(c.Dir, ".tmp-live-456")
	os.WriteFile(stale, []byte("half"), 0o644)
	os.WriteFile(fresh, []byte("half"), 0o644)
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(stale, old, old)
	if err := c.Put(testKey, []byte("img")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Error("a temp file from a writer dead for hours was not removed")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("a fresh temp file (a writer may still be at work) was removed")
	}
}

func TestCacheConcurrentGoroutines(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if err := c.Put(testKey, payload(fmt.Sprintf("g%d-%d", w, i), 64<<10)); err != nil {
					errs <- err
					return
				}
				img, hit, err := c.Get(testKey)
				if err != nil || !hit {
					errs <- fmt.Errorf("read after write: hit %v err %v", hit, err)
					return
				}
				if err := validPayload(img); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCacheHelperProcess is not a test: the tests below run the test binary
// again as writer processes through it.
func TestCacheHelperProcess(t *testing.T) {
	mode := os.Getenv("MSTAR_CACHE_HELPER")
	if mode == "" {
		t.Skip("helper process for the cache tests")
	}
	c := &Cache{Dir: os.Getenv("MSTAR_CACHE_HELPER_DIR")}
	id := os.Getenv("MSTAR_CACHE_HELPER_ID")
	switch mode {
	case "write":
		for i := 0; i < 15; i++ {
			if err := c.Put(testKey, payload(fmt.Sprintf("p%s-%d", id, i), 256<<10)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
		}
		os.Exit(0)
	case "hang":
		// Stop between writing the temp file and renaming it, say so, and
		// wait to be killed.
		testHookBeforeRename = func(tmp string) {
			// Renamed into place, so the parent never reads it half written
			// (it kills this process as soon as "ready" exists).
			ready := filepath.Join(c.Dir, "ready")
			os.WriteFile(ready+".part", []byte(tmp), 0o644)
			os.Rename(ready+".part", ready)
			time.Sleep(time.Minute)
		}
		c.Put(testKey, payload("never", 1<<20))
		os.Exit(4)
	}
}

func helper(t *testing.T, mode, dir, id string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCacheHelperProcess$")
	cmd.Env = append(os.Environ(), "MSTAR_CACHE_HELPER="+mode, "MSTAR_CACHE_HELPER_DIR="+dir, "MSTAR_CACHE_HELPER_ID="+id)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestCacheConcurrentProcesses(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	var cmds []*exec.Cmd
	for p := 0; p < 4; p++ {
		cmd := helper(t, "write", c.Dir, strconv.Itoa(p))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	// Read while they write: every hit must be one writer's whole payload.
	done := make(chan error, len(cmds))
	for _, cmd := range cmds {
		go func(cmd *exec.Cmd) { done <- cmd.Wait() }(cmd)
	}
	reads, hits, finished := 0, 0, 0
	for finished < len(cmds) {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("writer process: %v", err)
			}
			finished++
		default:
			img, hit, err := c.Get(testKey)
			reads++
			if err != nil {
				t.Fatalf("read %d saw a damaged entry: %v", reads, err)
			}
			if hit {
				hits++
				if err := validPayload(img); err != nil {
					t.Fatalf("read %d: %v", reads, err)
				}
			}
		}
	}
	img, hit, err := c.Get(testKey)
	if err != nil || !hit || validPayload(img) != nil {
		t.Fatalf("final entry: hit %v err %v", hit, err)
	}
	t.Logf("%d reads during the writes, %d hits", reads, hits)
}

func TestCacheWriterKilledMidWrite(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	cmd := helper(t, "hang", c.Dir, "0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(c.Dir, "ready")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("writer never reached the rename")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	tmp, _ := os.ReadFile(ready)
	if _, err := os.Stat(string(tmp)); err != nil {
		t.Fatalf("the killed writer's temp file should still be there: %v", err)
	}
	if _, hit, err := c.Get(testKey); hit || err != nil {
		t.Fatalf("after the kill: hit %v err %v; want a clean miss", hit, err)
	}
	calls := 0
	img := payload("recompiled", 1000)
	got, hit, _, err := c.GetOrCompile(testKey, func() ([]byte, error) { calls++; return img, nil })
	if err != nil || hit || calls != 1 || !bytes.Equal(got, img) {
		t.Fatalf("recompile: hit %v calls %d err %v", hit, calls, err)
	}
	if _, hit, _, _ := c.GetOrCompile(testKey, func() ([]byte, error) { calls++; return img, nil }); !hit || calls != 1 {
		t.Errorf("after recompiling: hit %v calls %d; want a hit", hit, calls)
	}
}
