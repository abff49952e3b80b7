//go:build !amd64

package cpupeak

func kernels() []kernel { return nil }
