// Command mstar benchmarks and diagnoses the hot paths of Mixture-of-Experts
// inference on NVIDIA GPUs (and on the CPU, which stands in when there is no
// GPU). See README.md for the manual.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
