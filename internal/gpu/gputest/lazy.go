// Package gputest holds test doubles for the gpu layer.
package gputest

import (
	"errors"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// LazyDevice is a device whose streams are LazyStreams: the CPU backend
// with CUDA's ordering and nothing more.
type LazyDevice struct{ gpu.Device }

// NewStream wraps the device's stream in a LazyStream.
func (d LazyDevice) NewStream() (gpu.Stream, error) {
	s, err := d.Device.NewStream()
	return &LazyStream{Stream: s}, err
}

// LazyStream stands in for an asynchronous CUDA stream on the CPU backend:
// copies and memsets run only when the stream is synced, in the order
// queued. Code that reads a byte before waiting for the copy that writes
// it, or lets a copy overwrite a slot another copy has yet to read, sees
// wrong bytes here, as it would on a GPU.
type LazyStream struct {
	gpu.Stream
	// Syncs counts the calls to Sync.
	Syncs int
	// FailSync, when set, is what Sync returns, dropping the queued work.
	FailSync error
	pending  []func() error
	batches  int
}

// Pending is how many copies and memsets wait for the next Sync.
func (l *LazyStream) Pending() int { return len(l.pending) }

func (l *LazyStream) CopyHtoD(dst gpu.Buffer, off int64, src []byte) error {
	l.pending = append(l.pending, func() error { return l.Stream.CopyHtoD(dst, off, src) })
	return nil
}

func (l *LazyStream) CopyDtoH(dst []byte, src gpu.Buffer, off int64) error {
	l.pending = append(l.pending, func() error { return l.Stream.CopyDtoH(dst, src, off) })
	return nil
}

func (l *LazyStream) CopyDtoD(dst gpu.Buffer, dstOff int64, src gpu.Buffer, srcOff, n int64) error {
	l.pending = append(l.pending, func() error { return l.Stream.CopyDtoD(dst, dstOff, src, srcOff, n) })
	return nil
}

func (l *LazyStream) Memset(dst gpu.Buffer, off, n int64, v byte) error {
	l.pending = append(l.pending, func() error { return l.Stream.Memset(dst, off, n, v) })
	return nil
}

// Record queues an event: it completes, and takes the time, when a Sync
// runs the work queued before it, as a CUDA event does on the device.
func (l *LazyStream) Record() (gpu.Event, error) {
	ev := &LazyEvent{s: l}
	l.pending = append(l.pending, func() error {
		ev.t, ev.done = time.Now(), true
		return nil
	})
	return ev, nil
}

// WaitEvent makes later work wait for ev: when it runs, the work of ev's
// stream up to ev has run first.
func (l *LazyStream) WaitEvent(ev gpu.Event) error {
	e, ok := ev.(*LazyEvent)
	if !ok {
		return l.Stream.WaitEvent(ev)
	}
	l.pending = append(l.pending, e.Sync)
	return nil
}

// LazyEvent is a LazyStream's event.
type LazyEvent struct {
	s    *LazyStream
	t    time.Time
	done bool
}

// Sync runs its stream's queued work if the event has not been reached.
func (e *LazyEvent) Sync() error {
	if e.done {
		return nil
	}
	return e.s.Sync()
}

func (e *LazyEvent) Done() (bool, error) { return e.done, nil }
func (e *LazyEvent) Close() error        { return nil }

// Since is the time between two reached events.
func (e *LazyEvent) Since(start gpu.Event) (time.Duration, error) {
	s, ok := start.(*LazyEvent)
	if !ok {
		return 0, errors.New("start event is not a LazyEvent")
	}
	if !s.done || !e.done {
		return 0, errors.New("timing an event that has not been reached (its stream was not synced)")
	}
	return e.t.Sub(s.t), nil
}

// Sync runs the queued work in order and returns the first error.
func (l *LazyStream) Sync() error {
	l.Syncs++
	p := l.pending
	l.pending = nil
	if l.FailSync != nil {
		return l.FailSync
	}
	for _, f := range p {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// Batches counts the calls to CopyDtoDBatch.
func (l *LazyStream) Batches() int { return l.batches }

// CopyDtoDBatch queues the copies as one operation, as CUDA's batch does.
func (l *LazyStream) CopyDtoDBatch(copies []gpu.DtoDCopy) error {
	l.batches++
	cs := append([]gpu.DtoDCopy(nil), copies...)
	l.pending = append(l.pending, func() error {
		for _, c := range cs {
			if err := l.Stream.CopyDtoD(c.Dst, c.DstOff, c.Src, c.SrcOff, c.N); err != nil {
				return err
			}
		}
		return nil
	})
	return nil
}
