package main

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// startPinned starts cmd on cpus (all CPUs when empty): the child inherits
// the CPU mask of the thread that forks it, so this thread takes the mask
// for the start and gives it back after. A mask the kernel refuses (a
// cgroup's cpuset) starts cmd unpinned and says why in note.
func startPinned(cmd *exec.Cmd, cpus []int) (note string, err error) {
	if len(cpus) == 0 {
		return "", cmd.Start()
	}
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return fmt.Sprintf("not pinned: reading this thread's CPUs: %v", err), cmd.Start()
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return fmt.Sprintf("not pinned to CPUs %s: %v", cpuList(cpus), err), cmd.Start()
	}
	err = cmd.Start()
	if unix.SchedSetaffinity(0, &old) == nil {
		runtime.UnlockOSThread() // else the thread ends with this goroutine
	}
	return "", err
}

// ownGroup puts cmd in a process group of its own, so that a terminal's
// Ctrl-C reaches the parent alone, which stops each worker with one SIGINT
// (a second would end it before it writes what it measured); a worker whose
// parent dies gets SIGTERM.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
