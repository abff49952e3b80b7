//go:build !(linux && (amd64 || arm64))

package sigstack

import "syscall"

// Fix does nothing here: the CUDA libraries this guards against load only
// on Linux.
func Fix() []syscall.Signal { return nil }

// Changed names nothing here.
func Changed() []syscall.Signal { return nil }
