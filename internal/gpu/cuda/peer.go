package cuda

import "errors"

// peerCalls says whether the driver has the peer-access calls.
var peerCalls bool

var errNoPeerCalls = errors.New("this CUDA driver lacks the peer-access calls (cuDeviceCanAccessPeer, cuMemcpyPeerAsync)")

// CanAccessPeer reports whether c's device can read and write peer's
// memory directly (NVLink, or PCIe peer-to-peer).
func (c *Context) CanAccessPeer(peer *Context) (bool, error) {
	if !peerCalls {
		return false, errNoPeerCalls
	}
	var can int32
	err := checkf(drv.cuDeviceCanAccessPeer(&can, c.dev, peer.dev), "cuDeviceCanAccessPeer(%d, %d)", c.props.Ordinal, peer.props.Ordinal)
	return can == 1, err
}

// SetPeerAccess turns c's direct access to peer's memory on or off; asking
// for the state it is in already is no error.
func (c *Context) SetPeerAccess(peer *Context, on bool) error {
	if !peerCalls {
		return errNoPeerCalls
	}
	return c.Do(func() error {
		if on {
			if r := drv.cuCtxEnablePeerAccess(peer.ctx, 0); r != ErrorPeerEnabled {
				return checkf(r, "cuCtxEnablePeerAccess(%d -> %d)", c.props.Ordinal, peer.props.Ordinal)
			}
			return nil
		}
		if r := drv.cuCtxDisablePeerAccess(peer.ctx); r != ErrorPeerNotEnabled {
			return checkf(r, "cuCtxDisablePeerAccess(%d -> %d)", c.props.Ordinal, peer.props.Ordinal)
		}
		return nil
	})
}

// CopyPeer queues a copy of n bytes from src, memory of srcCtx, to dst,
// memory of dstCtx: directly when peer access is on, else staged by the
// driver through host memory.
func (s *Stream) CopyPeer(dst DevicePtr, dstCtx *Context, src DevicePtr, srcCtx *Context, n int64) error {
	if !peerCalls {
		return errNoPeerCalls
	}
	if n == 0 {
		return nil
	}
	return s.c.Do(func() error {
		return checkf(drv.cuMemcpyPeerAsync(uint64(dst), dstCtx.ctx, uint64(src), srcCtx.ctx, uint64(n), s.h), "cuMemcpyPeerAsync(%d)", n)
	})
}
