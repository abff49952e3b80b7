package main

import (
	"os"

	"github.com/mstar-dev/mstar/internal/doctor"
	"github.com/mstar-dev/mstar/internal/gpu/cuda"
)

// libraryFindings adapts the device layer's run-time discovery to doctor's
// checks.
func libraryFindings() []doctor.Library {
	var out []doctor.Library
	for _, c := range cuda.Discover().Components() {
		out = append(out, doctor.Library{Name: c.Name, Path: c.Path, EnvVar: c.EnvVar,
			Searched: c.Searched, Version: c.Version, Err: c.Err, Override: os.Getenv(c.EnvVar)})
	}
	return out
}
