// Package cuda is mstar's raw binding to NVIDIA's libraries, reached at run
// time through purego (dlopen, no cgo, no CUDA toolkit at build time):
//
//   - the CUDA driver API (libcuda.so.1): devices, the primary context,
//     memory, streams, events, graphs, modules and kernel launches (Context);
//   - NVRTC (libnvrtc.so.13 or .12): compiling CUDA C for the device's own
//     architecture (Compiler), with an on-disk cache that survives a process
//     killed mid-write (Cache);
//   - cuBLAS (libcublas.so.13 or .12): enough to run a bf16 GEMM (BLAS).
//
// Where each library was looked for, and the environment variable that
// overrides the search, is reported by Discover.
//
// The driver's current context belongs to an OS thread, and goroutines move
// between threads. Every method here therefore pins its goroutine to its
// thread and makes the context current before it calls the driver (Do), so
// callers never need to think about threads.
//
// Without the libraries every entry point returns an error that says what
// was searched; nothing here panics for want of a GPU.
package cuda
