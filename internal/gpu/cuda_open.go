package gpu

import "errors"

// openCUDA opens CUDA device n. The CUDA backend (package cuda) is being
// wired in; until then it reports that CUDA is unavailable.
func openCUDA(n int) (Device, error) {
	return nil, errors.New("CUDA backend not built into this mstar yet")
}
