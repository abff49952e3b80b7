package tier

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu"
)

// Poison is the byte a block is filled with before a restore, so that a
// read-back can measure how far the restore reached.
const Poison = 0xA5

// Block is a range of a pool's device memory.
type Block struct{ Off, Len int64 }

// Pool is device memory cut into blocks: what a serving process would spill
// (KV pages, expert weights, a tenant's state). Blocks start on pages.
type Pool struct {
	dev    gpu.Device
	buf    gpu.Buffer
	blocks []Block
	size   int64

	mu        sync.Mutex // guards the staging buffer
	stage     []byte
	freeStage func() error
}

// stageSize bounds one read-back or fill copy.
const stageSize = 16 << 20

// EvenBlocks cuts size bytes into n blocks of equal length (the last one
// takes the remainder).
func EvenBlocks(size int64, n int) []int64 {
	if n <= 0 {
		n = 1
	}
	out := make([]int64, n)
	each := size / int64(n)
	for i := range out {
		out[i] = each
	}
	out[n-1] += size - each*int64(n)
	return out
}

// NewPool allocates device memory for blocks of the given lengths.
func NewPool(dev gpu.Device, lens []int64) (*Pool, error) {
	p := &Pool{dev: dev}
	var off int64
	for i, n := range lens {
		if n <= 8 {
			// The pool size and block count asked for do not fit the scenario's
			// layout: bad input, not a failed gate.
			return nil, badinput.Errorf("pool: block %d of %d bytes (want more than 8)", i, n)
		}
		p.blocks = append(p.blocks, Block{Off: off, Len: n})
		off = roundUp(off+n, page)
	}
	p.size = off
	if err := p.Reacquire(); err != nil {
		return nil, err
	}
	return p, nil
}

// Buffer is the pool's device memory; nil while released.
func (p *Pool) Buffer() gpu.Buffer { return p.buf }

// Blocks returns the pool's blocks.
func (p *Pool) Blocks() []Block { return p.blocks }

// Bytes is the sum of the blocks' lengths.
func (p *Pool) Bytes() int64 {
	var n int64
	for _, b := range p.blocks {
		n += b.Len
	}
	return n
}

// Release frees the pool's device memory (a hibernated pool holds none).
func (p *Pool) Release() error {
	if p.buf == nil {
		return nil
	}
	err := p.buf.Free()
	p.buf = nil
	return err
}

// Reacquire allocates device memory again after Release. Its contents are
// whatever the device hands out.
func (p *Pool) Reacquire() error {
	if p.buf != nil {
		return nil
	}
	buf, err := p.dev.Alloc(p.size)
	if err != nil {
		return fmt.Errorf("pool of %d bytes: %w", p.size, err)
	}
	p.buf = buf
	return nil
}

// Close releases device memory and the staging buffer.
func (p *Pool) Close() error {
	err := p.Release()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.freeStage != nil {
		if ferr := p.freeStage(); err == nil {
			err = ferr
		}
		p.freeStage, p.stage = nil, nil
	}
	return err
}

// host returns the pool's memory when the device is the CPU backend, so
// fills and checks skip a copy.
func (p *Pool) host() []byte {
	if h, ok := p.buf.(*gpu.HostBuffer); ok {
		return h.Bytes()
	}
	return nil
}

func (p *Pool) staging() ([]byte, error) {
	if p.stage == nil {
		b, free, err := p.dev.AllocPinned(stageSize)
		if err != nil {
			return nil, fmt.Errorf("pool staging: %w", err)
		}
		p.stage, p.freeStage = b, free
	}
	return p.stage, nil
}

// gen is a counter-based generator (wyrand): fast, and a block's content is
// a function of (seed, block) alone.
type gen struct{ s uint64 }

func (g *gen) next() uint64 {
	g.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(g.s, g.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

func fillRand(b []byte, g *gen) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], g.next())
	}
	if i < len(b) {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], g.next())
		copy(b[i:], t[:])
	}
}

// tag is a block's last 8 bytes: its top byte is zero, so a block's end is
// never mistaken for poison.
func tag(seed uint64, i int) uint64 {
	return (seed*0x9e3779b97f4a7c15 ^ uint64(i)*0xbf58476d1ce4e5b9) >> 8
}

// Fill writes block i's content for seed (another seed is another tenant's
// data).
func (p *Pool) Fill(s gpu.Stream, i int, seed uint64) error {
	b := p.blocks[i]
	g := gen{s: seed ^ uint64(i+1)*0x94d049bb133111eb}
	var tail [8]byte
	binary.LittleEndian.PutUint64(tail[:], tag(seed, i))
	if h := p.host(); h != nil {
		mem := h[b.Off : b.Off+b.Len]
		fillRand(mem[:b.Len-8], &g)
		copy(mem[b.Len-8:], tail[:])
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st, err := p.staging()
	if err != nil {
		return err
	}
	for o := int64(0); o < b.Len; o += int64(len(st)) {
		c := min(int64(len(st)), b.Len-o)
		fillRand(st[:c], &g)
		if o+c == b.Len {
			copy(st[c-8:c], tail[:])
		}
		if err := s.CopyHtoD(p.buf, b.Off+o, st[:c]); err != nil {
			return fmt.Errorf("filling block %d: %w", i, err)
		}
		if err := s.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// FillAll fills every block for seed.
func (p *Pool) FillAll(s gpu.Stream, seed uint64) error {
	for i := range p.blocks {
		if err := p.Fill(s, i, seed); err != nil {
			return err
		}
	}
	return nil
}

// Poison fills block i with the Poison byte.
func (p *Pool) Poison(s gpu.Stream, i int) error {
	b := p.blocks[i]
	if err := s.Memset(p.buf, b.Off, b.Len, Poison); err != nil {
		return fmt.Errorf("poisoning block %d: %w", i, err)
	}
	return s.Sync()
}

// Check is what a read-back of a block found.
type Check struct {
	Hash uint64
	// Reached is the length of the block up to its last byte that is not
	// poison: after Poison and a restore, the bytes the restore delivered.
	// A short restore whose last delivered bytes happen to equal the poison
	// byte measures a few bytes shorter, never longer.
	Reached int64
}

// Check reads block i back and returns its hash and reach.
func (p *Pool) Check(s gpu.Stream, i int) (Check, error) {
	b := p.blocks[i]
	d := xxhash.New()
	var reached int64
	scan := func(base int64, c []byte) {
		for j := len(c) - 1; j >= 0; j-- {
			if c[j] != Poison {
				reached = base + int64(j) + 1
				return
			}
		}
	}
	if h := p.host(); h != nil {
		mem := h[b.Off : b.Off+b.Len]
		d.Write(mem)
		scan(0, mem)
		return Check{Hash: d.Sum64(), Reached: reached}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st, err := p.staging()
	if err != nil {
		return Check{}, err
	}
	for o := int64(0); o < b.Len; o += int64(len(st)) {
		c := min(int64(len(st)), b.Len-o)
		if err := s.CopyDtoH(st[:c], p.buf, b.Off+o); err != nil {
			return Check{}, fmt.Errorf("reading block %d back: %w", i, err)
		}
		if err := s.Sync(); err != nil {
			return Check{}, err
		}
		d.Write(st[:c])
		scan(o, st[:c])
	}
	return Check{Hash: d.Sum64(), Reached: reached}, nil
}

// Hashes reads every block back and returns their hashes.
func (p *Pool) Hashes(s gpu.Stream) ([]uint64, error) {
	out := make([]uint64, len(p.blocks))
	for i := range p.blocks {
		c, err := p.Check(s, i)
		if err != nil {
			return nil, err
		}
		out[i] = c.Hash
	}
	return out, nil
}
