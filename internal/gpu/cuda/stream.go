package cuda

import (
	"fmt"
	"time"
	"unsafe"
)

// Stream is a CUDA stream (non-blocking: it does not synchronise with the
// legacy default stream).
type Stream struct {
	c *Context
	h uintptr
}

// NewStream creates a stream.
func (c *Context) NewStream() (*Stream, error) {
	s := &Stream{c: c}
	err := c.Do(func() error { return check(drv.cuStreamCreate(&s.h, streamNonBlocking), "cuStreamCreate") })
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Handle is the raw CUstream, for libraries such as cuBLAS.
func (s *Stream) Handle() uintptr { return s.h }

// Context returns the stream's context.
func (s *Stream) Context() *Context { return s.c }

// Destroy releases the stream once its work completes.
func (s *Stream) Destroy() error {
	return s.c.Do(func() error { return check(drv.cuStreamDestroy(s.h), "cuStreamDestroy") })
}

// Synchronize waits for the stream's work.
func (s *Stream) Synchronize() error {
	return s.c.Do(func() error { return check(drv.cuStreamSync(s.h), "cuStreamSynchronize") })
}

// CopyHtoD queues a copy of src to dst. From page-locked memory it returns
// at once and src must stay untouched until the stream is synchronised;
// from pageable memory the driver stages src before returning.
func (s *Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return s.c.Do(func() error {
		return checkf(drv.cuMemcpyHtoDAsync(uint64(dst), unsafe.Pointer(&src[0]), uint64(len(src)), s.h), "cuMemcpyHtoDAsync(%d)", len(src))
	})
}

// CopyDtoH queues a copy into dst. Into page-locked memory it returns at
// once; dst holds the data after the stream is synchronised.
func (s *Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return s.c.Do(func() error {
		return checkf(drv.cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), uint64(src), uint64(len(dst)), s.h), "cuMemcpyDtoHAsync(%d)", len(dst))
	})
}

// CopyDtoD queues a device-to-device copy of n bytes.
func (s *Stream) CopyDtoD(dst, src DevicePtr, n int64) error {
	if n == 0 {
		return nil
	}
	return s.c.Do(func() error {
		return checkf(drv.cuMemcpyDtoDAsync(uint64(dst), uint64(src), uint64(n), s.h), "cuMemcpyDtoDAsync(%d)", n)
	})
}

// Memset queues setting n bytes at dst to v.
func (s *Stream) Memset(dst DevicePtr, v byte, n int64) error {
	if n == 0 {
		return nil
	}
	return s.c.Do(func() error {
		return checkf(drv.cuMemsetD8Async(uint64(dst), v, uint64(n), s.h), "cuMemsetD8Async(%d)", n)
	})
}

// Record places e after the work queued so far.
func (s *Stream) Record(e *Event) error {
	return s.c.Do(func() error { return check(drv.cuEventRecord(e.h, s.h), "cuEventRecord") })
}

// Wait makes later work on s wait for e.
func (s *Stream) Wait(e *Event) error {
	return s.c.Do(func() error { return check(drv.cuStreamWaitEvent(s.h, e.h, 0), "cuStreamWaitEvent") })
}

// BeginCapture starts recording the stream's work into a graph instead of
// running it. See CaptureRelaxed for the mode Go callers usually want.
func (s *Stream) BeginCapture(mode CaptureMode) error {
	return s.c.Do(func() error {
		return checkf(drv.cuStreamBeginCapture(s.h, uint32(mode)), "cuStreamBeginCapture(mode %d)", mode)
	})
}

// EndCapture stops recording and returns the graph.
func (s *Stream) EndCapture() (*Graph, error) {
	g := &Graph{c: s.c}
	err := s.c.Do(func() error { return check(drv.cuStreamEndCapture(s.h, &g.h), "cuStreamEndCapture") })
	if err != nil {
		return nil, err
	}
	return g, nil
}

// IsCapturing reports whether the stream is being captured.
func (s *Stream) IsCapturing() (bool, error) {
	var st uint32
	err := s.c.Do(func() error { return check(drv.cuStreamIsCapturing(s.h, &st), "cuStreamIsCapturing") })
	return st == 1, err // CU_STREAM_CAPTURE_STATUS_ACTIVE
}

// Event is a CUDA event.
type Event struct {
	c *Context
	h uintptr
}

// NewEvent creates an event; timing events can measure elapsed time,
// others are cheaper to record and wait on.
func (c *Context) NewEvent(timing bool) (*Event, error) {
	flags := uint32(eventDefault)
	if !timing {
		flags = eventDisableTiming
	}
	e := &Event{c: c}
	if err := c.Do(func() error { return check(drv.cuEventCreate(&e.h, flags), "cuEventCreate") }); err != nil {
		return nil, err
	}
	return e, nil
}

// NewBlockingEvent creates a non-timing event whose Synchronize blocks the
// calling thread in the driver instead of spinning on a core: for a thread
// that waits on events for a living (an ACK watcher), where a default event
// would burn a core per waiter.
func (c *Context) NewBlockingEvent() (*Event, error) {
	e := &Event{c: c}
	flags := uint32(eventBlockingSync | eventDisableTiming)
	if err := c.Do(func() error { return check(drv.cuEventCreate(&e.h, flags), "cuEventCreate") }); err != nil {
		return nil, err
	}
	return e, nil
}

// Handle is the raw CUevent.
func (e *Event) Handle() uintptr { return e.h }

// Synchronize blocks until the work before the event has completed.
func (e *Event) Synchronize() error {
	return e.c.Do(func() error { return check(drv.cuEventSync(e.h), "cuEventSynchronize") })
}

// Query reports, without blocking, whether the event has completed.
func (e *Event) Query() (bool, error) {
	var r Result
	err := e.c.Do(func() error {
		r = drv.cuEventQuery(e.h)
		if r == ErrorNotReady {
			return nil
		}
		return check(r, "cuEventQuery")
	})
	return err == nil && r == Success, err
}

// Elapsed returns the device time from start to e; both must have completed.
// The driver's resolution is about half a microsecond.
func (e *Event) Elapsed(start *Event) (time.Duration, error) {
	var ms float32
	err := e.c.Do(func() error { return check(drv.cuEventElapsed(&ms, start.h, e.h), "cuEventElapsedTime") })
	return time.Duration(float64(ms) * 1e6), err
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	return e.c.Do(func() error { return check(drv.cuEventDestroy(e.h), "cuEventDestroy") })
}

// Graph is a captured CUDA graph.
type Graph struct {
	c *Context
	h uintptr
}

// Instantiate makes the graph launchable.
func (g *Graph) Instantiate() (*GraphExec, error) {
	x := &GraphExec{c: g.c}
	err := g.c.Do(func() error { return check(drv.cuGraphInstantiate(&x.h, g.h, 0), "cuGraphInstantiateWithFlags") })
	if err != nil {
		return nil, err
	}
	return x, nil
}

// Destroy releases the graph; instantiated copies stay valid.
func (g *Graph) Destroy() error {
	return g.c.Do(func() error { return check(drv.cuGraphDestroy(g.h), "cuGraphDestroy") })
}

// GraphExec is an instantiated graph.
type GraphExec struct {
	c *Context
	h uintptr
}

// Launch queues one replay of the graph on s.
func (x *GraphExec) Launch(s *Stream) error {
	return x.c.Do(func() error { return check(drv.cuGraphLaunch(x.h, s.h), "cuGraphLaunch") })
}

// Destroy releases the instantiated graph.
func (x *GraphExec) Destroy() error {
	return x.c.Do(func() error { return check(drv.cuGraphExecDestroy(x.h), "cuGraphExecDestroy") })
}

// Capture records fn's work on s into an instantiated graph (relaxed mode).
// The capture is ended even when fn fails, so the stream is usable again.
func (s *Stream) Capture(fn func() error) (*GraphExec, error) {
	if err := s.BeginCapture(CaptureRelaxed); err != nil {
		return nil, err
	}
	ferr := fn()
	g, err := s.EndCapture()
	if ferr != nil {
		if g != nil {
			g.Destroy()
		}
		return nil, fmt.Errorf("capturing: %w", ferr)
	}
	if err != nil {
		return nil, err
	}
	defer g.Destroy()
	return g.Instantiate()
}

// WaitValue32 makes later work on s wait until the 32-bit word at addr
// reaches v (>= v, cyclically).
func (s *Stream) WaitValue32(addr DevicePtr, v uint32) error {
	if !streamMemOps {
		return ErrNoStreamMemOps
	}
	return s.c.Do(func() error {
		return checkf(drv.cuStreamWaitValue32(s.h, uint64(addr), v, waitValueGEQ), "cuStreamWaitValue32_v2(%d)", v)
	})
}

// WriteValue32 queues a write of v to the 32-bit word at addr.
func (s *Stream) WriteValue32(addr DevicePtr, v uint32) error {
	if !streamMemOps {
		return ErrNoStreamMemOps
	}
	return s.c.Do(func() error {
		return checkf(drv.cuStreamWriteValue32(s.h, uint64(addr), v, writeValueDefault), "cuStreamWriteValue32_v2(%d)", v)
	})
}
