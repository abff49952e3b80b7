package gpu

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
)

// openCUDA opens CUDA device n. Without a driver or a device it returns the
// reason (what was searched), never panics.
func openCUDA(n int) (Device, error) {
	ctx, err := cuda.Open(n)
	if err != nil {
		return nil, err
	}
	p := ctx.Props()
	return &cudaDevice{ctx: ctx, info: Info{
		ID:        fmt.Sprintf("cuda:%d", n),
		Backend:   CUDA,
		Name:      p.Name,
		Arch:      p.Arch(),
		CCMajor:   p.CCMajor,
		CCMinor:   p.CCMinor,
		SMs:       p.SMs,
		L2Bytes:   p.L2Bytes,
		MemBytes:  p.MemBytes,
		Driver:    p.DriverAPI,
		ClockMHz:  p.ClockMHz,
		MemBusBit: p.MemBusBits,
		PCIBusID:  p.PCIBusID,
	}}, nil
}

// CUDAOf returns the CUDA context behind a device, for suites that compile
// and launch their own kernels; ok is false on other backends.
func CUDAOf(d Device) (ctx *cuda.Context, ok bool) {
	c, ok := d.(*cudaDevice)
	if !ok {
		return nil, false
	}
	return c.ctx, true
}

// CUDAStreamOf returns the CUDA stream behind a Stream (to launch kernels
// on it, or capture it into a graph); ok is false on other backends.
func CUDAStreamOf(s Stream) (*cuda.Stream, bool) {
	c, ok := s.(*cudaStream)
	if !ok {
		return nil, false
	}
	return c.s, true
}

// CUDAPtrOf returns the device address of a Buffer; ok is false on other
// backends.
func CUDAPtrOf(b Buffer) (cuda.DevicePtr, bool) {
	c, ok := b.(*cudaBuffer)
	if !ok {
		return 0, false
	}
	return c.ptr, true
}

// CUDAEventOf returns the CUDA event behind an Event.
func CUDAEventOf(e Event) (*cuda.Event, bool) {
	c, ok := e.(*cudaEvent)
	if !ok {
		return nil, false
	}
	return c.ev, true
}

type cudaDevice struct {
	ctx  *cuda.Context
	info Info
}

func (d *cudaDevice) Info() Info { return d.info }

func (d *cudaDevice) MemInfo() (free, total int64, err error) { return d.ctx.MemInfo() }

func (d *cudaDevice) Alloc(n int64) (Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("alloc: negative size %d", n)
	}
	if n == 0 {
		return &cudaBuffer{ctx: d.ctx}, nil
	}
	p, err := d.ctx.Alloc(n)
	if err != nil {
		if free, total, merr := d.ctx.MemInfo(); merr == nil {
			return nil, fmt.Errorf("%w (%d of %d bytes free on %s)", err, free, total, d.info.ID)
		}
		return nil, err
	}
	return &cudaBuffer{ctx: d.ctx, ptr: p, size: n}, nil
}

func (d *cudaDevice) AllocPinned(n int64) ([]byte, func() error, error) {
	if n < 0 {
		return nil, nil, fmt.Errorf("alloc pinned: negative size %d", n)
	}
	if n == 0 {
		return []byte{}, func() error { return nil }, nil
	}
	mem, err := d.ctx.HostAlloc(n, cuda.HostAllocPortable)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	var ferr error
	return mem, func() error {
		once.Do(func() { ferr = d.ctx.FreeHost(mem) })
		return ferr
	}, nil
}

func (d *cudaDevice) Register(mem []byte) (func() error, error) {
	if err := d.ctx.HostRegister(mem, cuda.HostRegisterPortable); err != nil {
		return nil, err
	}
	var once sync.Once
	var uerr error
	return func() error {
		once.Do(func() { uerr = d.ctx.HostUnregister(mem) })
		return uerr
	}, nil
}

func (d *cudaDevice) NewStream() (Stream, error) {
	s, err := d.ctx.NewStream()
	if err != nil {
		return nil, err
	}
	return &cudaStream{s: s}, nil
}

func (d *cudaDevice) Sync() error  { return d.ctx.Synchronize() }
func (d *cudaDevice) Close() error { return d.ctx.Close() }

type cudaBuffer struct {
	ctx   *cuda.Context
	ptr   cuda.DevicePtr
	size  int64
	freed atomic.Bool
}

func (b *cudaBuffer) Size() int64 { return b.size }

func (b *cudaBuffer) Free() error {
	if b.freed.Swap(true) || b.size == 0 {
		return nil
	}
	return b.ctx.Free(b.ptr)
}

func cudaBuf(b Buffer) (*cudaBuffer, error) {
	c, ok := b.(*cudaBuffer)
	if !ok {
		return nil, fmt.Errorf("buffer of type %T does not belong to the CUDA backend", b)
	}
	if c.freed.Load() {
		return nil, fmt.Errorf("buffer of %d bytes used after Free", c.size)
	}
	return c, nil
}

type cudaStream struct{ s *cuda.Stream }

func (s *cudaStream) CopyHtoD(dst Buffer, off int64, src []byte) error {
	d, err := cudaBuf(dst)
	if err != nil {
		return err
	}
	if err := span("copy HtoD", off, int64(len(src)), d.size); err != nil {
		return err
	}
	return s.s.CopyHtoD(d.ptr+cuda.DevicePtr(off), src)
}

func (s *cudaStream) CopyDtoH(dst []byte, src Buffer, off int64) error {
	b, err := cudaBuf(src)
	if err != nil {
		return err
	}
	if err := span("copy DtoH", off, int64(len(dst)), b.size); err != nil {
		return err
	}
	return s.s.CopyDtoH(dst, b.ptr+cuda.DevicePtr(off))
}

func (s *cudaStream) CopyDtoD(dst Buffer, dstOff int64, src Buffer, srcOff, n int64) error {
	d, err := cudaBuf(dst)
	if err != nil {
		return err
	}
	b, err := cudaBuf(src)
	if err != nil {
		return err
	}
	if err := span("copy DtoD dst", dstOff, n, d.size); err != nil {
		return err
	}
	if err := span("copy DtoD src", srcOff, n, b.size); err != nil {
		return err
	}
	return s.s.CopyDtoD(d.ptr+cuda.DevicePtr(dstOff), b.ptr+cuda.DevicePtr(srcOff), n)
}

func (s *cudaStream) Memset(dst Buffer, off, n int64, v byte) error {
	d, err := cudaBuf(dst)
	if err != nil {
		return err
	}
	if err := span("memset", off, n, d.size); err != nil {
		return err
	}
	return s.s.Memset(d.ptr+cuda.DevicePtr(off), v, n)
}

func (s *cudaStream) Record() (Event, error) {
	return s.record(s.s.Context().NewEvent(true))
}

// RecordBlocking is Record with an event that cannot time but whose Sync
// sleeps instead of spinning (CU_EVENT_BLOCKING_SYNC): for goroutines that
// wait on completions, like the arena's ACK watcher.
func (s *cudaStream) RecordBlocking() (Event, error) {
	return s.record(s.s.Context().NewBlockingEvent())
}

// record records a new event ev (or passes on the error that creating it
// gave) on the stream.
func (s *cudaStream) record(ev *cuda.Event, err error) (Event, error) {
	if err != nil {
		return nil, err
	}
	if err := s.s.Record(ev); err != nil {
		ev.Destroy()
		return nil, err
	}
	return &cudaEvent{ev: ev}, nil
}

// BlockingRecorder is a Stream whose RecordBlocking returns an event whose
// Sync blocks without spinning a core (CUDA). Streams without it (the CPU
// backend, whose events complete at once) use Record.
type BlockingRecorder interface {
	RecordBlocking() (Event, error)
}

// RecordBlocking records a completion event to wait on: a blocking-sync
// event where the stream has one, else a plain Record.
func RecordBlocking(s Stream) (Event, error) {
	if b, ok := s.(BlockingRecorder); ok {
		return b.RecordBlocking()
	}
	return s.Record()
}

func (s *cudaStream) WaitEvent(ev Event) error {
	e, ok := ev.(*cudaEvent)
	if !ok {
		return fmt.Errorf("event of type %T does not belong to the CUDA backend", ev)
	}
	return s.s.Wait(e.ev)
}

func (s *cudaStream) Sync() error  { return s.s.Synchronize() }
func (s *cudaStream) Close() error { return s.s.Destroy() }

type cudaEvent struct {
	ev     *cuda.Event
	closed atomic.Bool
}

func (e *cudaEvent) Sync() error         { return e.ev.Synchronize() }
func (e *cudaEvent) Done() (bool, error) { return e.ev.Query() }

func (e *cudaEvent) Since(start Event) (time.Duration, error) {
	s, ok := start.(*cudaEvent)
	if !ok {
		return 0, fmt.Errorf("event of type %T does not belong to the CUDA backend", start)
	}
	return e.ev.Elapsed(s.ev)
}

func (e *cudaEvent) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	return e.ev.Destroy()
}
