//go:build !linux

package main

import (
	"os/exec"
	"syscall"
)

// startPinned starts cmd; pinning to CPUs is Linux only.
func startPinned(cmd *exec.Cmd, cpus []int) (string, error) {
	if len(cpus) > 0 {
		return "not pinned: CPU affinity is set on Linux only", cmd.Start()
	}
	return "", cmd.Start()
}

// ownGroup puts cmd in a process group of its own (see pin_linux.go).
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }
