package gputest

import (
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// OpenCUDA opens the first CUDA device for a test, or skips the test saying
// why there is none; the device closes when the test ends.
func OpenCUDA(t testing.TB) gpu.Device {
	t.Helper()
	d, _, err := gpu.Open(gpu.Spec{Backend: gpu.CUDA})
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
