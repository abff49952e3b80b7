package cpupeak

import "golang.org/x/sys/cpu"

func available() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// fmaLoop runs iters iterations of 12 independent VFMADD231PS.
//
//go:noescape
func fmaLoop(iters int)
