// Package router holds pluggable Mixture-of-Experts routers, the workloads
// that feed them, and the metrics that judge them.
//
// # Routers
//
// A Router maps one layer's router logits (T tokens × E experts) to each
// token's top-k experts and their weights:
//
//	type Router interface {
//		Name() string
//		Route(in Input, st State) (routing.Routing, State, error)
//	}
//
// Logits are the primitive; a driver computes them from a layer's hidden
// states [T×H] and gate weights [E×H] (NewInput: logits = hidden · gateᵀ,
// with the hidden states and gate kept in the Input for routers that want
// them), so that any router can be checked from logits alone, as
// `mstar route --logits FILE` does. A router may keep
// state from one call to the next — the previous layer's logits, biases
// that adapt batch by batch. Drive threads it through the layers of a
// batch; a run of several batches carries the state returned by one Drive
// into the next. Stateless routers take and return nil.
//
// Built in, each with its exact formula on its type: softmax-topk and
// softmax-topk-norm (Qwen2/Qwen3-MoE, norm_topk_prob), mixtral (top-k then
// softmax), deepseek-v2 (group-limited greedy), deepseek-v3 (sigmoid,
// correction bias, top-2 group score) and deepseek-v3-lossfree (its
// loss-free bias update as state), switch (capacity factor, token
// dropping), expert-choice, hash, random, random-skewed, balanced (the
// perfectly uniform reference), cross-layer (stateful: previous logits
// mixed in) and trace (Replay: a recorded routing as is).
//
// Ties are broken toward the lower expert id everywhere (the lower group
// id for groups, the lower token id for expert choice), so routing never
// depends on sort stability or on the machine.
//
// # Adding a router
//
// Implement Router. Route receives an Input whose logits are valid (Drive
// checks sizes, k ≤ E and that every value is finite) and returns a
// routing.Routing of T rows × K slots — the one routing type, which the
// fused-MoE kernels compute as is: expert ids in [0,E), distinct within a
// token, and their weights; routing.Empty marks an empty slot and
// Routing.Dropped marks assignments lost to capacity. Return a new state rather than mutating
// the old one. To make it reachable by name (New, and so the mstar
// commands in a build that imports your package), call Register from an
// init function. The package example ExampleRouter shows a complete one.
//
// # Workloads
//
// Workload makes synthetic hidden states with a controllable skew (Zipf
// affinity for a few hot experts) and correlation between layers, for gate
// weights that are random (RandomGate) or read from a checkpoint
// (LoadGates reads model.layers.N.mlp.gate.weight, and DeepSeek-V3's
// model.layers.N.mlp.gate.e_score_correction_bias where present, from a
// safetensors file or a directory of shards; F32, F16 and BF16). A
// recorded routing is replayed as is from a trace file; see Trace for its
// format (JSON Lines: a header line, then one line per token per layer).
//
// # Metrics
//
// Load computes MaxVio (max load / mean load − 1), balancedness (mean /
// max), the coefficient of variation and the normalised entropy of the
// expert loads; Routing.TokenDrops counts tokens routed to no expert;
// AuxLoss is the Switch Transformer balance loss E·Σ f_i·P_i and ZLoss the
// ST-MoE router z-loss. What a routing costs a fused-MoE kernel is measured
// by the ablation suite (bench/ablate).
package router
