package gpu

import (
	"errors"
	"fmt"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
)

// Gater is a Device that can hold streams back until the host has queued
// everything, so that device time measured on them holds no host delay.
// The CPU backend is none: its streams run inside the call.
type Gater interface {
	// NewGate makes an open gate; an error wrapping ErrUnsupported says the
	// device or driver cannot hold streams.
	NewGate() (Gate, error)
}

// Gate holds streams: work queued on a held stream after Hold runs only
// once Open is called; the gate can then hold again. Work queued behind a
// hold must not make the host wait for the device (a stream or event sync,
// a synchronous copy): that wait would never end. Used by one goroutine at
// a time.
type Gate interface {
	Hold(s Stream) error
	// Open releases every stream held since the last Open.
	Open() error
	// Close opens the gate if anything is held and releases it.
	Close() error
}

// NewGate makes a gate of a device word (cuda.Gate). It also loads this
// package's kernels (copy_batch, evict_l2 and its scratch buffer) first:
// loading a kernel can wait for the whole context, held streams included.
func (d *cudaDevice) NewGate() (Gate, error) {
	g, err := d.ctx.NewGate()
	if errors.Is(err, cuda.ErrNotSupported) || errors.Is(err, cuda.ErrNoStreamMemOps) {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	if err != nil {
		return nil, err
	}
	_, err = kernelFor(&copyBatchFns, d.ctx, copyBatchSource, "copybatch.cu", "copy_batch")
	if err == nil {
		_, err = kernelFor(&evictFns, d.ctx, evictSource, "evict.cu", "evict_l2")
	}
	if err == nil {
		_, err = scratchFor(d.ctx)
	}
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("loading the kernels queued behind a gate: %w", err)
	}
	return &cudaGate{g: g}, nil
}

type cudaGate struct{ g *cuda.Gate }

func (g *cudaGate) Hold(s Stream) error {
	cs, ok := CUDAStreamOf(s)
	if !ok {
		return fmt.Errorf("stream of type %T does not belong to the CUDA backend", s)
	}
	return g.g.Hold(cs)
}

func (g *cudaGate) Open() error  { return g.g.Open() }
func (g *cudaGate) Close() error { return g.g.Close() }
