package main

import "github.com/mstar-dev/mstar/internal/doctor"

// libraryFindings adapts the device layer's run-time discovery to doctor's
// checks.
func libraryFindings() []doctor.Library {
	return nil
}
