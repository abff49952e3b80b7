package spill

import (
	"fmt"
	"sync"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// evictingDevice is the CPU backend with streams that can evict the cache
// (as CUDA's can), recording, per stream, whether a batched move ran
// since the last eviction of the device.
type evictingDevice struct {
	gpu.Device
	mu         sync.Mutex
	evictions  int
	batches    int
	warm       map[*evictingStream]bool // batched since the last eviction
	violations []string
}

type evictingStream struct {
	gpu.Stream
	d *evictingDevice
}

func (d *evictingDevice) NewStream() (gpu.Stream, error) {
	s, err := d.Device.NewStream()
	if err != nil {
		return nil, err
	}
	return &evictingStream{Stream: s, d: d}, nil
}

func (s *evictingStream) EvictCache() error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.evictions++
	s.d.warm = map[*evictingStream]bool{}
	return nil
}

func (s *evictingStream) CopyDtoDBatch(copies []gpu.DtoDCopy) error {
	s.d.mu.Lock()
	s.d.batches++
	if s.d.warm[s] {
		s.d.violations = append(s.d.violations, fmt.Sprintf("batch %d", s.d.batches))
	}
	s.d.warm[s] = true
	s.d.mu.Unlock()
	return s.Stream.(gpu.BatchCopier).CopyDtoDBatch(copies)
}

// Every timed device move, in the cells with bandwidth gates and in their
// ceilings, starts from an evicted cache: no stream moves twice without an
// eviction between.
func TestTimedMovesStartCold(t *testing.T) {
	d := &evictingDevice{Device: gpu.NewCPU(), warm: map[*evictingStream]bool{}}
	cfg := small(t)
	cfg.Dev = d
	m := run(t, cfg, "hibernate/device,partial/device,uneven/device", 1<<20)
	for _, o := range m.Outcomes {
		if o.Err != nil {
			t.Fatalf("%s: %v", o.Cell.Name(), o.Err)
		}
	}
	if d.batches == 0 || d.evictions < d.batches/5 {
		t.Fatalf("%d batched moves, %d evictions", d.batches, d.evictions)
	}
	if len(d.violations) > 0 {
		t.Errorf("%d of %d batched moves ran on a warm cache: %v", len(d.violations), d.batches, d.violations)
	}
}
