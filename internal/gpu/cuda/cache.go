package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Cache keeps compiled kernels on disk, one file per key. Files are written
// atomically (temp file, fsync, rename, fsync of the folder) and carry a
// header with the key, the length and a SHA-256 of the image, checked on
// every load: a torn or corrupted file is a miss, never a bad image.
// Concurrent writers, in this process or others, each rename a complete file
// into place; the last one wins and every reader sees a whole file.
type Cache struct {
	Dir string
}

// DefaultCacheDir is $MSTAR_CACHE_DIR, else $XDG_CACHE_HOME/mstar/kernels,
// else ~/.cache/mstar/kernels.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kernel cache: %w (set %s)", err, EnvCacheDir)
	}
	return filepath.Join(base, "mstar", "kernels"), nil
}

// CacheKey is everything that determines a compiled image.
type CacheKey struct {
	Source   string
	Name     string
	Arch     string
	Options  []string
	Compiler string // "nvrtc 13.0 cubin": a new compiler version is a new key
}

// Hash is the key's SHA-256, hex. Fields are length-prefixed so that no two
// different keys can serialise alike.
func (k CacheKey) Hash() string {
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put("mstar-kernel-key-v1")
	put(k.Compiler)
	put(k.Arch)
	put(k.Name)
	put(strconv.Itoa(len(k.Options)))
	for _, o := range k.Options {
		put(o)
	}
	put(k.Source)
	return hex.EncodeToString(h.Sum(nil))
}

const cacheMagic = "mstar-kernel-cache v1"

// Path is the file that holds key's image.
func (c *Cache) Path(key CacheKey) string { return filepath.Join(c.Dir, key.Hash()+".bin") }

func encodeEntry(hash string, image []byte) []byte {
	sum := sha256.Sum256(image)
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nkey %s\nlen %d\nsha256 %s\n\n", cacheMagic, hash, len(image), hex.EncodeToString(sum[:]))
	b.Write(image)
	return b.Bytes()
}

// decodeEntry checks a cache file and returns its image.
func decodeEntry(hash string, data []byte) ([]byte, error) {
	head, body, ok := bytes.Cut(data, []byte("\n\n"))
	if !ok {
		return nil, errors.New("no header (torn write?)")
	}
	lines := strings.Split(string(head), "\n")
	if len(lines) != 4 || lines[0] != cacheMagic {
		return nil, fmt.Errorf("bad header %q", firstN(string(head), 80))
	}
	if got := strings.TrimPrefix(lines[1], "key "); got != hash {
		return nil, fmt.Errorf("holds key %s, want %s", firstN(got, 16), firstN(hash, 16))
	}
	n, err := strconv.Atoi(strings.TrimPrefix(lines[2], "len "))
	if err != nil || n < 0 {
		return nil, fmt.Errorf("bad length line %q", lines[2])
	}
	if len(body) != n {
		return nil, fmt.Errorf("image is %d bytes, header says %d (torn write?)", len(body), n)
	}
	sum := sha256.Sum256(body)
	if want := strings.TrimPrefix(lines[3], "sha256 "); hex.EncodeToString(sum[:]) != want {
		return nil, errors.New("checksum mismatch (corrupted)")
	}
	return body, nil
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Get returns key's image. A missing file is (nil, false, nil); a file that
// fails its checks is a miss with an error saying why, so the caller can
// warn and recompile.
func (c *Cache) Get(key CacheKey) ([]byte, bool, error) {
	p := c.Path(key)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("kernel cache: reading %s: %w", p, err)
	}
	img, err := decodeEntry(key.Hash(), data)
	if err != nil {
		return nil, false, fmt.Errorf("kernel cache: %s: %w; recompiling", p, err)
	}
	return img, true, nil
}

// testHookBeforeRename runs between writing the temp file and renaming it
// into place; tests use it to kill a writer mid-way.
var testHookBeforeRename func(tmp string)

// Put stores key's image atomically.
func (c *Cache) Put(key CacheKey, image []byte) (err error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	hash := key.Hash()
	f, err := os.CreateTemp(c.Dir, ".tmp-"+hash[:16]+"-*")
	if err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(encodeEntry(hash, image)); err != nil {
		return fmt.Errorf("kernel cache: writing %s: %w", tmp, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("kernel cache: fsync %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("kernel cache: closing %s: %w", tmp, err)
	}
	if testHookBeforeRename != nil {
		testHookBeforeRename(tmp)
	}
	if err = os.Rename(tmp, c.Path(key)); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	if d, derr := os.Open(c.Dir); derr == nil {
		d.Sync() // make the rename durable; failure here loses only a cache entry
		d.Close()
	}
	c.sweepTemps(time.Hour)
	return nil
}

// sweepTemps removes temp files that writers killed mid-write left behind.
func (c *Cache) sweepTemps(olderThan time.Duration) {
	m, _ := filepath.Glob(filepath.Join(c.Dir, ".tmp-*"))
	for _, p := range m {
		if st, err := os.Stat(p); err == nil && time.Since(st.ModTime()) > olderThan {
			os.Remove(p)
		}
	}
}

// GetOrCompile returns key's image from the cache, or compiles and stores
// it. hit says which. warn reports a cache problem (a corrupt entry, an
// unwritable folder) that did not stop the compile; err is the compile's.
func (c *Cache) GetOrCompile(key CacheKey, compile func() ([]byte, error)) (image []byte, hit bool, warn, err error) {
	img, ok, gerr := c.Get(key)
	if ok {
		return img, true, nil, nil
	}
	img, err = compile()
	if err != nil {
		return nil, false, gerr, err
	}
	if perr := c.Put(key, img); perr != nil {
		return img, false, errors.Join(gerr, perr), nil
	}
	return img, false, gerr, nil
}
