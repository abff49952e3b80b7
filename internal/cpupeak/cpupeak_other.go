//go:build !amd64

package cpupeak

func available() bool { return false }

func fmaLoop(iters int) { panic("cpupeak: no peak kernel on this CPU") }
