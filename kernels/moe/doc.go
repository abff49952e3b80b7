// Package moe is mstar's fused Mixture-of-Experts layer: shapes and model
// presets, bf16 helpers, routing generation and trace files, a float64
// reference (the correctness oracle for every other implementation), a fast
// parallel float32 CPU path, the token-to-expert alignment, and the CUDA
// kernels (moe.cu, compiled by NVRTC at run time) with their launch plans.
//
// The layer, for x[M,H] and a routing that gives each token m its top-k
// experts topk_ids[m,j] with weights topk_weights[m,j]:
//
//	out[m] = Σ_j w[m,j] · W2[e] · (silu(W1_gate[e]·x[m]) ⊙ W1_up[e]·x[m]),  e = topk_ids[m,j]
//
// W1[E,2I,H] holds the gate projection in rows 0..I-1 and the up projection
// in rows I..2I-1; W2[E,H,I] is the down projection. Weights and activations
// are stored as bf16; every implementation accumulates in float32 or wider.
//
// Sharding follows the usual serving layouts. --tp N splits I across N ranks
// (each rank holds I/N columns of the intermediate; the partial outputs would
// be all-reduced, which is outside this layer). --ep N splits the experts: a
// rank holds E/N local experts, and a token's slot whose expert lives on
// another rank is dropped from the local computation (its routing id becomes
// -1 after routing.Routing.Localize). mstar measures rank 0.
package moe
