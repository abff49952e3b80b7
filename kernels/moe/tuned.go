package moe

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mstar-dev/mstar/internal/jsonpos"
)

// Tuned configuration files: per (E, N, K, top-k, dtype, device, kernel
// version), the configuration `mstar tune moe` picked for each batch size.
// N is the local intermediate size (what GEMM1 produces per half), K the
// hidden size (what it reduces over), as in vLLM's and sglang's tuned
// fused-MoE files. The kernel version is inside the file, not in its name:
// a file from another moe.cu is found, then ignored with a warning saying so.
// Each batch names the source its candidates compiled from (BatchKernels), so
// a change to the wgmma kernels alone invalidates only the batches where a wg
// configuration was a candidate: the tc, skinny and tiled picks stay; and a
// change to the gv kernels only those where a gv configuration was.

// TunedFormat names the files' format.
const TunedFormat = "mstar.moe-configs"

// EnvConfigDir overrides the user's folder of tuned files.
const EnvConfigDir = "MSTAR_MOE_CONFIG_DIR"

// A tuned batch is valid only for the kernels it was tuned on: the parts of
// moe.cu its candidates compiled from. Every batch depends on the base (the
// file less its wgmma and gv sections); a batch with a wg candidate also on
// the wgmma section, one with a gv candidate on the gv section. Each
// combination has a version; the two that predate the gv section keep their
// spelling, so files tuned before it stay valid.
var (
	// KernelVersion: the base and the wgmma section, the version files
	// record as the build that wrote them.
	KernelVersion = sourceVersion(Source, true, false)
	// BaseKernelVersion: the tc, skinny and tiled kernels.
	BaseKernelVersion = sourceVersion(Source, false, false)
	// GVKernelVersion: the base and the gv section.
	GVKernelVersion = sourceVersion(Source, false, true)
	// WGGVKernelVersion: the whole file.
	WGGVKernelVersion = sourceVersion(Source, true, true)
)

// sourceVersion is the version of src's base plus, as wg and gv say, its
// wgmma and gv sections (the prefixes of the two older versions unchanged).
func sourceVersion(src string, wg, gv bool) string {
	if !gv {
		src = withoutSection(src, gvSectionBegin, gvSectionEnd)
	}
	if !wg {
		src = withoutSection(src, wgSectionBegin, wgSectionEnd)
	}
	prefix := map[[2]bool]string{{false, false}: "moe.cu-base", {true, false}: "moe.cu", {false, true}: "moe.cu-gv", {true, true}: "moe.cu-wg-gv"}[[2]bool{wg, gv}]
	sum := sha256.Sum256([]byte(src))
	return fmt.Sprintf("%s-%x", prefix, sum[:6])
}

// The wgmma section's first and last lines in moe.cu (the MOE_WG_LIST
// block, which only wg modules compile), and the gv section's.
const (
	wgSectionBegin, wgSectionEnd = "\n#ifdef MOE_WG_LIST\n", "\n#endif  // MOE_WG_LIST\n"
	gvSectionBegin, gvSectionEnd = "\n// MOE_GV section: begin\n", "\n// MOE_GV section: end\n"
)

// withoutSection is src less the lines from begin's to end's (both kept
// from the newline that ends the line before), or src when they are not
// both found in order (then a version without the section changes with any
// edit, as the whole file's does).
func withoutSection(src, begin, end string) string {
	i := strings.Index(src, begin)
	j := strings.Index(src, end)
	if i < 0 || j < i {
		return src
	}
	return src[:i+1] + src[j+len(end):]
}

// BatchKernels is the version a batch tuned over cands depends on, by
// whether a wg and whether a gv configuration (or half of a split) was
// among them.
func BatchKernels(cands []Config) string {
	var wg, gv bool
	for _, c := range cands {
		for _, g := range []Config{c.Gemm(1), c.Gemm(2)} {
			wg = wg || g.Kernel == "wg"
			gv = gv || g.GV != 0
		}
	}
	return [2][2]string{{BaseKernelVersion, GVKernelVersion}, {KernelVersion, WGGVKernelVersion}}[b2i(wg)][b2i(gv)]
}

// currentKernels says whether v is one of this build's batch versions.
func currentKernels(v string) bool {
	return v == KernelVersion || v == BaseKernelVersion || v == GVKernelVersion || v == WGGVKernelVersion
}

//go:embed configs/*.json
var shippedConfigs embed.FS

// ShippedConfigs is the tuned files built into the binary (kernels/moe/configs).
func ShippedConfigs() fs.FS { return shippedConfigs }

// TunedKey is what a tuned file is for.
type TunedKey struct {
	E, N, K, TopK int
	DType         string // "bf16"
	Device        string // the device's name, "NVIDIA H200"
}

// KeyFor is the key of a local shape on a device.
func KeyFor(s Shape, device string) TunedKey {
	return TunedKey{E: s.E, N: s.I, K: s.H, TopK: s.K, DType: "bf16", Device: device}
}

func (k TunedKey) String() string {
	return fmt.Sprintf("E=%d N=%d K=%d topk=%d %s on %s", k.E, k.N, k.K, k.TopK, k.DType, k.Device)
}

// FileName is the key as a file name:
// "E=128,N=768,K=2048,topk=8,dtype=bf16,device=NVIDIA_H200.json".
func (k TunedKey) FileName() string {
	dev := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, k.Device)
	return fmt.Sprintf("E=%d,N=%d,K=%d,topk=%d,dtype=%s,device=%s.json", k.E, k.N, k.K, k.TopK, k.DType, dev)
}

// TunedFile is one tuned file.
type TunedFile struct {
	Format        string `json:"format"` // TunedFormat
	E             int    `json:"E"`
	N             int    `json:"N"`
	K             int    `json:"K"`
	TopK          int    `json:"topk"`
	DType         string `json:"dtype"`
	Device        string `json:"device"`
	KernelVersion string `json:"kernel_version"`
	// Batches maps a batch size (decimal) to its configuration, tuned under
	// uniform routing.
	Batches map[string]TunedBatch `json:"batches,omitempty"`
	// Routings holds batches tuned under other routings ("zipf:1.2",
	// "trace:NAME"), by routing then batch size: a skewed routing can want
	// other tiles, and tuning for it must not replace the uniform picks.
	Routings map[string]map[string]TunedBatch `json:"routings,omitempty"`
	// Provenance.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	Note    string    `json:"note,omitempty"`
}

// TunedBatch is one batch's pick and how it was chosen.
type TunedBatch struct {
	Config string `json:"config"` // ParseConfig reads it
	// Timings of the pick and of the static table's configuration, µs per
	// call (medians of the tuning samples); absent when not measured.
	LatencyUS float64   `json:"latency_us,omitempty"`
	Samples   []float64 `json:"samples_us,omitempty"`
	// FreshUS: the pick's median over fresh processes, when the tune judged
	// its finalists there (tune moe --finalists); Finalists says how each
	// read ("config: median µs (per process)").
	FreshUS    float64   `json:"fresh_us,omitempty"`
	Finalists  []string  `json:"finalists,omitempty"`
	Static     string    `json:"static,omitempty"`
	StaticUS   float64   `json:"static_us,omitempty"`
	Candidates int       `json:"candidates,omitempty"`
	Rejected   []string  `json:"rejected,omitempty"` // "config: why"
	Date       time.Time `json:"date"`
	Commit     string    `json:"mstar_commit,omitempty"`
	Routing    string    `json:"routing,omitempty"`
	// Kernels is the source version the batch's candidates compiled from
	// (BatchKernels); absent in older files, where the file's
	// kernel_version stands for it.
	Kernels string `json:"kernels,omitempty"`
}

// NewTunedFile is an empty file for key, for this build's kernels.
func NewTunedFile(k TunedKey, now time.Time) *TunedFile {
	return &TunedFile{Format: TunedFormat, E: k.E, N: k.N, K: k.K, TopK: k.TopK, DType: k.DType, Device: k.Device,
		KernelVersion: KernelVersion, Batches: map[string]TunedBatch{}, Created: now.UTC(), Updated: now.UTC()}
}

// Key is the file's key.
func (f *TunedFile) Key() TunedKey {
	return TunedKey{E: f.E, N: f.N, K: f.K, TopK: f.TopK, DType: f.DType, Device: f.Device}
}

// Uniform is the routing the file's Batches were tuned under.
const Uniform = "uniform"

// CanonicalRouting is a tuned-routing key as the tuned files and results
// name it: "uniform" for "" and any spelling of it, zipf's alpha in its
// shortest form ("zipf:1.20" is "zipf:1.2"); anything else (a trace's name)
// as given; an expert-parallel suffix (TunedRouting) kept, "@ep1" dropped.
func CanonicalRouting(s string) string {
	base, ep, _ := splitEP(s)
	return TunedRouting(base, ep)
}

// TunedRouting is the key a run's batches are kept under in a tuned file:
// its routing (canonical), and under expert parallelism over ep > 1 ranks
// "@epN" after it. A rank's E/ep experts see ep× fewer slots per token than
// a model without EP whose local shape is the same (its file's key), so
// neither may take the other's picks.
func TunedRouting(routing string, ep int) string {
	r := strings.TrimSpace(routing)
	if l := strings.ToLower(r); l == "" || l == Uniform {
		r = Uniform
	} else if a, err := ParseRoutingSpec(r); err == nil && a > 0 {
		r = "zipf:" + strconv.FormatFloat(a, 'g', -1, 64)
	}
	if ep > 1 {
		r += "@ep" + strconv.Itoa(ep)
	}
	return r
}

// splitEP splits key into its routing and its EP rank count (1 without a
// suffix). A suffix is "@ep" and digits only (a trace may be named
// "a@epoch.json"); ok is false for a count below 1.
func splitEP(key string) (routing string, ep int, ok bool) {
	i := strings.LastIndex(key, "@ep")
	if i < 0 {
		return key, 1, true
	}
	digits := key[i+len("@ep"):]
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return key, 1, true // part of a name
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 {
		return key, 1, false
	}
	return key[:i], n, true
}

// uniformAlike is the uniform key with key's EP suffix.
func uniformAlike(key string) string {
	_, ep, _ := splitEP(key)
	return TunedRouting(Uniform, ep)
}

// IsUniformKey reports whether key is uniform routing, with or without EP.
func IsUniformKey(key string) bool {
	base, _, ok := splitEP(key)
	return ok && CanonicalRouting(base) == Uniform
}

// checkRoutingKey refuses a key of a file's routings that tune moe would
// not record: uniform without EP (whose batches are the file's batches), a
// misspelled or non-positive zipf, an unnamed trace, a bad EP suffix.
func checkRoutingKey(key string) error {
	r, ep, ok := splitEP(key)
	want := "zipf:ALPHA (alpha > 0, as --routing records it) or trace:NAME, with @epN (N ≥ 2) under EP"
	switch {
	case !ok || CanonicalRouting(key) != key:
		if c := CanonicalRouting(key); ok && c != Uniform {
			want = fmt.Sprintf("%q, as tune moe records it", c)
		}
	case key == Uniform:
		return errors.New(`"uniform": uniform batches go in "batches"`)
	case r == Uniform && ep > 1:
		return nil
	case strings.HasPrefix(r, "trace:") && len(r) > len("trace:"):
		return nil
	case strings.HasPrefix(r, "zipf:"):
		if _, err := ParseRoutingSpec(r); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%q: want %s", key, want)
}

// batchesUnder is the map of routing's batches (nil when none).
func (f *TunedFile) batchesUnder(routing string) map[string]TunedBatch {
	if routing = CanonicalRouting(routing); routing == Uniform {
		return f.Batches
	}
	return f.Routings[routing]
}

// Get is batch m tuned under routing.
func (f *TunedFile) Get(m int, routing string) (TunedBatch, bool) {
	b, ok := f.batchesUnder(routing)[strconv.Itoa(m)]
	return b, ok
}

// Has reports whether batch m is in the file under routing.
func (f *TunedFile) Has(m int, routing string) bool {
	_, ok := f.Get(m, routing)
	return ok
}

// Set records batch m under b's routing (uniform when unset).
func (f *TunedFile) Set(m int, b TunedBatch) {
	f.put(m, b)
	f.Updated = b.Date.UTC()
}

// put is Set without touching Updated.
func (f *TunedFile) put(m int, b TunedBatch) {
	r := CanonicalRouting(b.Routing)
	b.Routing = r
	if r == Uniform {
		if f.Batches == nil {
			f.Batches = map[string]TunedBatch{}
		}
		f.Batches[strconv.Itoa(m)] = b
	} else {
		if f.Routings == nil {
			f.Routings = map[string]map[string]TunedBatch{}
		}
		if f.Routings[r] == nil {
			f.Routings[r] = map[string]TunedBatch{}
		}
		f.Routings[r][strconv.Itoa(m)] = b
	}
}

// TunedBatchSizes are the file's uniform batch sizes, ascending.
func (f *TunedFile) TunedBatchSizes() []int { return f.TunedBatchSizesUnder(Uniform) }

// TunedBatchSizesUnder are routing's batch sizes, ascending.
func (f *TunedFile) TunedBatchSizesUnder(routing string) []int {
	return batchSizes(f.batchesUnder(routing))
}

func batchSizes(bs map[string]TunedBatch) []int {
	var out []int
	for k := range bs {
		if n, err := strconv.Atoi(k); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// Len is how many batches the file has, over every routing.
func (f *TunedFile) Len() int {
	n := len(f.Batches)
	for _, bs := range f.Routings {
		n += len(bs)
	}
	return n
}

// TunedRoutings are the routings the file has batches for, uniform first
// (when it has any), the others in name order.
func (f *TunedFile) TunedRoutings() []string {
	var out []string
	if len(f.Batches) > 0 {
		out = append(out, Uniform)
	}
	var rest []string
	for r, bs := range f.Routings {
		if len(bs) > 0 {
			rest = append(rest, r)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// ParseTunedFile reads and checks a tuned file; name is for errors.
func ParseTunedFile(b []byte, name string) (*TunedFile, error) {
	var f TunedFile
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&f); err != nil {
		return nil, fmt.Errorf("tuned config file %s: %w", name, jsonpos.Error(b, 0, err))
	}
	if f.Format != TunedFormat {
		return nil, fmt.Errorf("tuned config file %s: format %q, want %q", name, f.Format, TunedFormat)
	}
	if f.E <= 0 || f.N <= 0 || f.K <= 0 || f.TopK <= 0 || f.DType == "" || f.Device == "" || f.KernelVersion == "" {
		return nil, fmt.Errorf("tuned config file %s: E, N, K, topk, dtype, device and kernel_version are all required", name)
	}
	check := func(where string, bs map[string]TunedBatch) error {
		for m, bt := range bs {
			if n, err := strconv.Atoi(m); err != nil || n <= 0 {
				return fmt.Errorf("tuned config file %s: %s %q is not a positive token count", name, where, m)
			}
			c, err := ParseConfig(bt.Config)
			if err != nil {
				return fmt.Errorf("tuned config file %s: %s %s: %w", name, where, m, err)
			}
			if c.Kernel == "tiled" && c.Tile == "custom" {
				// A custom tile is compiled into the base module: --config only.
				return fmt.Errorf("tuned config file %s: %s %s: a custom tiled tile (%v) can only be given with --config", name, where, m, c)
			}
		}
		return nil
	}
	if err := check("batch", f.Batches); err != nil {
		return nil, err
	}
	for r, bs := range f.Routings {
		if err := checkRoutingKey(r); err != nil {
			return nil, fmt.Errorf("tuned config file %s: routings: %w", name, err)
		}
		if err := check("routing "+r+" batch", bs); err != nil {
			return nil, err
		}
		for m, bt := range bs {
			switch bt.Routing {
			case r:
			case "": // the enclosing routing says it
				bt.Routing = r
				bs[m] = bt
			default:
				return nil, fmt.Errorf("tuned config file %s: routing %s batch %s says it was tuned under %q", name, r, m, bt.Routing)
			}
		}
	}
	// Files written before Routings kept a skewed tune's batches in Batches
	// (and gave them to uniform runs too): they move to their routing.
	for m, bt := range f.Batches {
		if r := CanonicalRouting(bt.Routing); r != Uniform {
			if _, taken := f.Routings[r][m]; !taken {
				n, _ := strconv.Atoi(m)
				f.put(n, bt)
			}
			delete(f.Batches, m)
		}
	}
	return &f, nil
}

// Marshal is the file's JSON, indented, batches in numeric order.
func (f *TunedFile) Marshal() ([]byte, error) {
	// encoding/json sorts map keys as strings ("1024" before "16"); the
	// batches are written in numeric order by hand.
	type alias TunedFile
	head := alias(*f)
	head.Batches = nil
	head.Routings = nil
	b, err := json.MarshalIndent(head, "", "  ")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Write(b[:len(b)-2]) // drop "\n}"
	batches := func(indent string, bs map[string]TunedBatch) error {
		for i, m := range batchSizes(bs) {
			v, err := json.Marshal(bs[strconv.Itoa(m)])
			if err != nil {
				return err
			}
			if i > 0 {
				buf.WriteByte(',')
			}
			fmt.Fprintf(&buf, "\n%s\"%d\": %s", indent, m, v)
		}
		return nil
	}
	buf.WriteString(",\n  \"batches\": {")
	if err := batches("    ", f.Batches); err != nil {
		return nil, err
	}
	if len(f.Batches) > 0 {
		buf.WriteString("\n  ")
	}
	buf.WriteString("}")
	if rs := slices.DeleteFunc(f.TunedRoutings(), func(r string) bool { return r == Uniform }); len(rs) > 0 {
		buf.WriteString(",\n  \"routings\": {")
		for i, r := range rs {
			if i > 0 {
				buf.WriteByte(',')
			}
			name, _ := json.Marshal(r)
			fmt.Fprintf(&buf, "\n    %s: {", name)
			if err := batches("      ", f.Routings[r]); err != nil {
				return nil, err
			}
			buf.WriteString("\n    }")
		}
		buf.WriteString("\n  }")
	}
	buf.WriteString("\n}\n")
	return buf.Bytes(), nil
}

// WriteTunedFile writes f into dir under its key's file name, atomically
// (a temporary file renamed over it), creating dir; it returns the path.
func WriteTunedFile(dir string, f *TunedFile) (string, error) {
	b, err := f.Marshal()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("tuned config folder: %w", err)
	}
	p := filepath.Join(dir, f.Key().FileName())
	tmp, err := os.CreateTemp(dir, "."+f.Key().FileName()+".tmp*")
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", p, err)
	}
	_, werr := tmp.Write(b)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), p)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("writing %s: %w", p, werr)
	}
	return p, nil
}

// UserConfigDir is where `tune moe` writes and `bench moe` first looks:
// $MSTAR_MOE_CONFIG_DIR, else $XDG_CACHE_HOME/mstar/moe-configs, else
// ~/.cache/mstar/moe-configs.
func UserConfigDir() (string, error) {
	if d := os.Getenv(EnvConfigDir); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("tuned config folder: %w (set %s)", err, EnvConfigDir)
	}
	return filepath.Join(base, "mstar", "moe-configs"), nil
}

// TunedLookup says where to look for a key's tuned file.
type TunedLookup struct {
	Dirs     []string // searched first, in order (the user's folder)
	Embedded fs.FS    // then this (ShippedConfigs); nil: none
}

// DefaultTunedLookup is the user's folder, then the shipped files. An
// unusable user folder is left out (the shipped files still apply).
func DefaultTunedLookup() TunedLookup {
	l := TunedLookup{Embedded: shippedConfigs}
	if d, err := UserConfigDir(); err == nil {
		l.Dirs = []string{d}
	}
	return l
}

// Find returns the tuned file for key and where it came from ("file PATH"
// or "embedded configs/NAME"), or nil when there is none for this build's
// kernels. Files passed over (another kernel version, malformed, for
// another key, unreadable) are named in the warnings. The error is always
// nil today; it is there for lookups that can fail as a whole.
func (l TunedLookup) Find(key TunedKey) (*TunedFile, string, []string, error) {
	name := key.FileName()
	var warns []string
	try := func(b []byte, where string) *TunedFile {
		f, err := ParseTunedFile(b, where)
		switch {
		case err != nil:
			warns = append(warns, fmt.Sprintf("ignored %v", err))
		case f.Key() != key:
			warns = append(warns, fmt.Sprintf("ignored tuned config file %s: it is for %v, not %v", where, f.Key(), key))
		default:
			stale, was := f.dropStale()
			switch {
			case len(f.TunedRoutings()) == 0 && (len(stale) > 0 || f.KernelVersion != KernelVersion):
				if was == "" {
					was = f.KernelVersion
				}
				warns = append(warns, fmt.Sprintf("ignored tuned config file %s: tuned for kernels %s, this build's are %s (moe.cu changed): run 'mstar tune moe' again",
					where, was, KernelVersion))
				return nil
			case len(stale) > 0:
				warns = append(warns, fmt.Sprintf("ignored M=%s of tuned config file %s: tuned for kernels %s, this build's are %s (moe.cu's wgmma or gv kernels changed): run 'mstar tune moe' again",
					strings.Join(stale, ","), where, was, KernelVersion))
			}
			return f
		}
		return nil
	}
	for _, d := range l.Dirs {
		p := filepath.Join(d, name)
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			warns = append(warns, fmt.Sprintf("ignored tuned config file: %v", err))
			continue
		}
		if f := try(b, p); f != nil {
			return f, "file " + p, warns, nil
		}
	}
	if l.Embedded != nil {
		p := path.Join("configs", name)
		if b, err := fs.ReadFile(l.Embedded, p); err == nil {
			if f := try(b, "embedded "+p); f != nil {
				return f, "embedded " + p, warns, nil
			}
		}
	}
	return nil, "", warns, nil
}

// dropStale removes the batches tuned on other kernels than this build's and
// returns their sizes (those of other routings as "M@ROUTING") and the first
// one's version. A batch without its own version gets the file's.
func (f *TunedFile) dropStale() (stale []string, was string) {
	for _, r := range f.TunedRoutings() {
		bs := f.batchesUnder(r)
		for _, m := range batchSizes(bs) {
			k := strconv.Itoa(m)
			b := bs[k]
			if b.Kernels == "" {
				b.Kernels = f.KernelVersion
				bs[k] = b
			}
			if !currentKernels(b.Kernels) {
				if was == "" {
					was = b.Kernels
				}
				label := k
				if r != Uniform {
					label += "@" + r
				}
				stale = append(stale, label)
				delete(bs, k)
			}
		}
		if r != Uniform && len(bs) == 0 {
			delete(f.Routings, r)
		}
	}
	return stale, was
}

// JoinBatches writes batch sizes as the --batch flag takes them: "1,4,16".
func JoinBatches(ms []int) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = strconv.Itoa(m)
	}
	return strings.Join(s, ",")
}

// TunedPick is what a tuned file gives one batch.
type TunedPick struct {
	// Config is the pick; empty for the static table (where the file says
	// auto, or has no batch that can stand in).
	Config Config
	// Exact: the file has this batch, under Routing; otherwise Note says
	// what stood in (the nearest tuned batch) or why none did.
	Exact   bool
	Routing string
	Note    string
}

// PickFor is the configuration for batch m under routing (a TunedRouting
// key): the file's own batch m tuned under that routing (exactly m: a
// skewed routing's tiles follow its hottest experts, which another batch
// size does not predict), else its uniform batch m (with the same EP
// suffix), else the nearest such uniform batch (in ratio) within a factor
// of 2 of m whose configuration can run m; else the empty Config (the
// static table), with a Note saying why.
func (f *TunedFile) PickFor(s Shape, m int, routing string) TunedPick {
	key := CanonicalRouting(routing)
	uniform := uniformAlike(key)
	for _, r := range []string{key, uniform} {
		if b, ok := f.Get(m, r); ok {
			c, _ := ParseConfig(b.Config) // checked when read
			return TunedPick{Config: c, Exact: true, Routing: r}
		}
	}
	under := ""
	if uniform != Uniform {
		under = " under " + uniform
	}
	best, dist := 0, math.Inf(1)
	for _, n := range f.TunedBatchSizesUnder(uniform) {
		if d := math.Abs(math.Log(float64(n) / float64(m))); d < dist {
			best, dist = n, d
		}
	}
	if best == 0 || dist > math.Log(2)+1e-9 {
		return TunedPick{Note: fmt.Sprintf("M=%d not tuned%s and no tuned batch within 2×: static table", m, under)}
	}
	b, _ := f.Get(best, uniform)
	c, _ := ParseConfig(b.Config)
	if err := CheckConfigShape(c, s, m); err != nil {
		return TunedPick{Note: fmt.Sprintf("M=%d not tuned%s; the nearest tuned batch's (%d) cannot run it: static table", m, under, best)}
	}
	return TunedPick{Config: c, Routing: uniform, Note: fmt.Sprintf("nearest tuned batch %d%s (M=%d not tuned)", best, under, m)}
}
