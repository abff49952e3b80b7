// Package sigstack keeps foreign signal handlers on the alternate signal
// stack.
//
// The Go runtime runs its signal handler on an alternate stack it gives
// every thread, and dies ("non-Go code set up signal handler without
// SA_ONSTACK flag") when a handler installed by non-Go code — a CUDA
// library loaded at run time — takes a signal without that flag and
// passes it on to Go's. A job runner's SIGINT at a deadline did exactly
// that to `tune moe` on an H100 (reports/measured/h100/moe-v29/tune/run.log).
// One culprit, found with NVRTC 11.8: its LLVM installs SIGINT, SIGTERM and
// SIGXFSZ handlers while compiling and then puts Go's back without
// SA_ONSTACK or SA_SIGINFO. Fix, called after a CUDA library loads,
// initializes or compiles, restores the runtime's own actions where its
// handler was put back altered, and adds SA_ONSTACK to foreign handlers,
// as the os/signal documentation asks of non-Go code.
package sigstack
