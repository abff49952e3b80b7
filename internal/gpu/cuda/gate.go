package cuda

import (
	"errors"
	"fmt"
)

// streamMemOps says whether the driver has the stream memory operations.
var streamMemOps bool

// ErrNoStreamMemOps is returned by the stream memory operations when the
// driver lacks them.
var ErrNoStreamMemOps = errors.New("this CUDA driver lacks the stream memory operations (cuStreamWaitValue32_v2, cuStreamWriteValue32_v2)")

// Gate holds streams back on the device: a held stream waits for a device
// word to reach the gate's next value, and Open writes that value from the
// gate's own stream. Open must not queue behind the held streams, so it is
// neither on the legacy default stream nor a synchronous copy or memset.
// A Gate is used by one goroutine at a time.
type Gate struct {
	c    *Context
	word DevicePtr
	s    *Stream
	next uint32 // what the next Open writes; the holds since the last Open wait for it
	held bool
}

// NewGate makes an open gate. A device or driver without the stream memory
// operations gives an error matching ErrNotSupported or ErrNoStreamMemOps.
func (c *Context) NewGate() (*Gate, error) {
	if !streamMemOps {
		return nil, ErrNoStreamMemOps
	}
	s, err := c.NewStream()
	if err != nil {
		return nil, err
	}
	word, err := c.Alloc(4)
	if err != nil {
		s.Destroy()
		return nil, err
	}
	g := &Gate{c: c, word: word, s: s, next: 1}
	// Zero the word and wait for it on the gate's stream: both calls are
	// tried here, where a device without them fails before anything is held.
	err = s.WriteValue32(word, 0)
	if err == nil {
		err = s.WaitValue32(word, 0)
	}
	if err == nil {
		err = s.Synchronize()
	}
	if err != nil {
		g.release()
		return nil, fmt.Errorf("gate: %w", err)
	}
	return g, nil
}

// Hold makes work queued on s from now on wait until the next Open.
func (g *Gate) Hold(s *Stream) error {
	if err := s.WaitValue32(g.word, g.next); err != nil {
		return err
	}
	g.held = true
	return nil
}

// Open releases every stream held since the last Open; the gate can then
// hold again.
func (g *Gate) Open() error {
	if err := g.s.WriteValue32(g.word, g.next); err != nil {
		return err
	}
	g.next++
	g.held = false
	return nil
}

// Close opens the gate if anything is held, then releases it.
func (g *Gate) Close() error {
	var err error
	if g.held {
		err = g.Open()
	}
	return errors.Join(err, g.s.Synchronize(), g.release())
}

func (g *Gate) release() error {
	return errors.Join(g.s.Destroy(), g.c.Free(g.word))
}
