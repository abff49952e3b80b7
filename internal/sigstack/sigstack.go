// Package sigstack keeps foreign signal handlers on the alternate signal
// stack.
//
// The Go runtime runs its signal handler on an alternate stack it gives
// every thread, and dies ("non-Go code set up signal handler without
// SA_ONSTACK flag") when a handler installed by non-Go code — a CUDA
// library loaded at run time — takes a signal without that flag and
// passes it on to Go's. A job runner's SIGINT at a deadline did exactly
// that to `tune moe` on an H100 (reports/measured/h100/moe-v29/tune/run.log).
// Fix, called after such a library loads or initializes, adds SA_ONSTACK
// to every installed handler that lacks it, as the os/signal documentation
// asks of non-Go code.
package sigstack
