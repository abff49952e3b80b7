#!/usr/bin/env python3
"""Peers of `mstar bench moe`, timed on the same shapes and the same routing.

For every "moe" result in an mstar results document (--mstar), this runner
rebuilds the very same layer and inputs and times other implementations of
it on the GPU:

  torch-loop        a plain PyTorch loop over the touched experts (matmul,
                    SiLU·mul, matmul, index_add)
  torch-grouped_mm  torch._grouped_mm over the expert-sorted tokens
  triton-fused_moe  sglang's (or else vLLM's) Triton fused_moe, when one of
                    them is importable; otherwise reported as unmeasured
  triton-ref        the fused_experts of a module given by path (--triton-peer
                    or $MSTAR_TRITON_PEER: a .py file, or a folder holding
                    triton_moe_ref.py or a package), e.g. shared/peers'
                    triton_moe_ref.py (the sglang/vLLM design, tuned per batch)
  cublas-bmm        a bound, not a layer: the layer's two GEMMs as torch.bmm
                    (cuBLAS batched GEMMs), the slots balanced over the touched
                    experts (each of min(E, M*k) experts gets ceil(M*k/that)
                    tokens), GEMMs only: no alignment, activation or combine.
                    Its gate checks one expert's GEMM outputs against float64.

Same layer: mstar's weights and inputs come from a counter-based generator
(kernels/moe/layer.go: splitmix64 of seed, stream and element index), which
this file re-implements bit for bit in torch int64 arithmetic, so no weights
travel. Same routing: the trace mstar wrote with --routing-out (batch M uses
its first M tokens; --ep keeps rank 0's experts, as mstar does).

Timing: per batch, the implementation's calls are captured into a CUDA graph
(enough calls to run >= ~3 ms, weight copies rotated as mstar rotates them
when the touched experts would fit in L2), replayed until its timing settles
(the rule of mstar's own warm-up: >= 0.1 s, until the last 3 replays are
within 5% of the 3 before, <= 3 s), then --samples replays between CUDA
events; a sample is µs per call. Routing
bookkeeping that depends only on the routing (which tokens go to which
expert, the sort order) is done once, outside the timed region: the peers'
times exclude token alignment, mstar's include it.

Correctness: each peer's output is compared with a float64 reference on the
same sampled tokens as mstar (all up to 64, else 64 spread over the batch):
relative L2 error above 1e-2 fails the gate. With --dump-dir (where mstar's
--dump-dir wrote out-M<batch>.bf16) each output is also compared with
mstar's, on every token (metric rel_l2_vs_mstar).

Output: an mstar results document (format "mstar.results", schema 1) whose
results have mstar's names and parameters with impl set to the peer, and
whose environment is mstar's document's (the same machine), so that
`mstar report show mstar.json peers.json` prints them in one table.

Usage (on the GPU machine):
  mstar bench moe --model qwen3-30b-a3b --device cuda:0 --out m.json \
      --routing-out r.json --dump-dir dump
  python3 scripts/peers/moe_peers.py --mstar m.json --routing r.json \
      --dump-dir dump --out peers.json
  python3 scripts/peers/moe_peers.py --selftest     # generator vs mstar's golden values
"""

import argparse
import datetime
import json
import math
import os
import sys
import time

MASK64 = (1 << 64) - 1
GOLDEN = [  # kernels/moe TestGeneratorGolden: (seed, stream, idx, fan_in, rand, bf16 bits)
    (1, 1, 0, 2048, 0x01D60447FEA35413, 0xBD1B),
    (1, 2, 12345, 768, 0x72A5D5795965211D, 0xBBD6),
    (7, 3, 3, 0, 0x7BF0FFC2AB3B7E72, 0xBD02),
]
STREAM_W1, STREAM_W2, STREAM_X = 1, 2, 3
MAX_REL_L2 = 1e-2
CHECK_TOKENS = 64


def s64(v):
    v &= MASK64
    return v - (1 << 64) if v >= (1 << 63) else v


# ---------------------------------------------------------------- generator (pure python, for the self-test)

def counter_rand_py(seed, stream, idx):
    z = ((seed ^ ((stream * 0xD1B54A32D192ED03) & MASK64)) + idx * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def f32(v):
    import struct
    return struct.unpack("f", struct.pack("f", v))[0]


def bf16_bits_py(v):
    import struct
    b = struct.unpack("I", struct.pack("f", v))[0]
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFFFFFF
    return b >> 16


def scale_for(fan_in):
    if fan_in == 0:
        return f32(1.0 / (1 << 24))
    return f32(f32(math.sqrt(3.0 / fan_in)) / (1 << 24))


def selftest_py():
    for seed, stream, idx, fan, want_r, want_b in GOLDEN:
        r = counter_rand_py(seed, stream, idx)
        n = 2 * (r >> 40) - (1 << 24)
        b = bf16_bits_py(f32(n * scale_for(fan)))
        if r != want_r or b != want_b:
            raise SystemExit(f"generator mismatch at {seed, stream, idx}: {r:#x} {b:#06x}, want {want_r:#x} {want_b:#06x}")
    # The warm-up rule: a series still climbing (a GPU reaching its power
    # cap) is not settled; a flat one is, once the minimum time has passed.
    climbing = [768, 769, 790, 835, 838, 850, 900, 960]
    if settled(climbing, 0.5)[0] or settled([800] * 6, 0.05)[0] or not settled([800] * 6, 0.2)[0]:
        raise SystemExit("warm-up rule: settled() disagrees with bench.Settle")
    if not settled(climbing, SETTLE_MAX_S)[0]:
        raise SystemExit("warm-up rule: the time limit does not end a warm-up")


# ---------------------------------------------------------------- generator (torch)

def srl(torch, z, s):
    """Logical right shift of int64 tensors."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def uniform_bf16(torch, seed, stream, start, count, fan_in, device):
    idx = torch.arange(start, start + count, dtype=torch.int64, device=device)
    z = s64(seed ^ ((stream * 0xD1B54A32D192ED03) & MASK64)) + idx * s64(0x9E3779B97F4A7C15)
    z = (z ^ srl(torch, z, 30)) * s64(0xBF58476D1CE4E5B9)
    z = (z ^ srl(torch, z, 27)) * s64(0x94D049BB133111EB)
    z = z ^ srl(torch, z, 31)
    n = 2 * srl(torch, z, 40) - (1 << 24)
    v = n.to(torch.float32) * torch.tensor(scale_for(fan_in), dtype=torch.float32, device=device)
    return v.to(torch.bfloat16)


def selftest_torch(torch, device):
    for seed, stream, idx, fan, _, want_b in GOLDEN:
        v = uniform_bf16(torch, seed, stream, idx, 1, fan, device)
        got = int(v.view(torch.int16).item()) & 0xFFFF
        if got != want_b:
            raise SystemExit(f"torch generator mismatch at {seed, stream, idx}: {got:#06x}, want {want_b:#06x}")


def make_layer(torch, E, H, I, seed, device):
    w1 = torch.empty(E, 2 * I, H, dtype=torch.bfloat16, device=device)
    w2 = torch.empty(E, H, I, dtype=torch.bfloat16, device=device)
    for e in range(E):
        w1[e] = uniform_bf16(torch, seed, STREAM_W1, e * 2 * I * H, 2 * I * H, H, device).view(2 * I, H)
        w2[e] = uniform_bf16(torch, seed, STREAM_W2, e * H * I, H * I, I, device).view(H, I)
    return w1, w2


def make_x(torch, M, H, seed, device):
    return uniform_bf16(torch, seed + 1, STREAM_X, 0, M * H, 0, device).view(M, H)


# ---------------------------------------------------------------- shapes, work, routing


def read_routing(path):
    """The first layer of a routing file as {"experts", "topk", "ids", "weights"}:
    mstar's JSON Lines form (a header {"format": "mstar.routing-trace", ...},
    then one {"layer", "ids", "weights"} per token) or the older single
    object {"experts", "topk", "ids": [[...]], "weights": [[...]]}."""
    with open(path) as f:
        text = f.read()
    first = text.split("\n", 1)[0]
    try:
        head = json.loads(first)
    except ValueError:
        head = None
    if not (isinstance(head, dict) and head.get("format") == "mstar.routing-trace"):
        return json.loads(text)
    out = {"experts": head["experts"], "topk": head["topk"], "ids": [], "weights": []}
    layer = None
    for line in text.splitlines()[1:]:
        if not line.strip():
            continue
        rec = json.loads(line)
        if layer is None:
            layer = rec["layer"]
        if rec["layer"] != layer:
            continue
        out["ids"].append(rec["ids"])
        k = len(rec["ids"])
        out["weights"].append(rec.get("weights") or [1.0 / k] * k)
    return out

def flops(H, I, slots):
    # kernels/moe Shape.Flops
    return slots * (2 * H * 2 * I + 2 * I * H + 4 * I + H + H)


def bytes_moved(H, I, M, touched, slots):
    # kernels/moe Shape.Bytes
    return touched * 3 * I * H * 2 + 2 * M * H * 2 + slots * 8


def check_tokens(M):
    n = min(M, CHECK_TOKENS)
    if M <= CHECK_TOKENS:
        return list(range(M))
    return [i * (M - 1) // (n - 1) for i in range(n)]


def localize(ids, E_global, ep):
    """Rank 0 of ep: experts [0, E/ep) stay, others become -1 (dropped)."""
    if ep <= 1:
        return ids
    local = E_global // ep
    return [[e if e < local else -1 for e in row] for row in ids]


class Routing:
    def __init__(self, torch, ids, weights, E, device):
        self.M, self.K = len(ids), len(ids[0])
        self.ids = torch.tensor(ids, dtype=torch.int64, device=device)
        self.w = torch.tensor(weights, dtype=torch.float32, device=device)
        flat = self.ids.flatten()
        keep = (flat >= 0).nonzero().flatten()
        order = keep[torch.argsort(flat[keep], stable=True)]  # slots sorted by expert
        self.sorted_slots = order
        self.sorted_tok = order // self.K
        self.sorted_w = self.w.flatten()[order]
        counts = torch.bincount(flat[keep], minlength=E)
        self.counts = counts.tolist()
        self.offs = torch.cumsum(counts, 0).to(torch.int32)
        self.slots = int(keep.numel())
        self.touched = sum(1 for c in self.counts if c > 0)
        self.topk_ids = self.ids.clamp(min=0).to(torch.int32)
        self.topk_w = torch.where(self.ids >= 0, self.w, torch.zeros_like(self.w))
        starts = [0]
        for c in self.counts:
            starts.append(starts[-1] + c)
        self.groups = [(e, order[starts[e]:starts[e + 1]]) for e in range(E) if self.counts[e] > 0]


# ---------------------------------------------------------------- implementations

def impl_loop(torch, F):
    def run(x, w1, w2, r, out):
        I = w2.shape[2]
        acc = torch.zeros(out.shape, dtype=torch.float32, device=x.device)
        for e, slots in r.groups:
            tok = slots // r.K
            h = x[tok] @ w1[e].t()
            a = F.silu(h[:, :I]) * h[:, I:]
            y = (a @ w2[e].t()).float() * r.w.flatten()[slots].unsqueeze(1)
            acc.index_add_(0, tok, y)
        out.copy_(acc)
    return run


def impl_grouped(torch, F):
    gm = getattr(torch, "_grouped_mm", None)
    if gm is None:
        return None, "torch._grouped_mm is not in this torch (" + torch.__version__ + ")"

    def run(x, w1, w2, r, out):
        I = w2.shape[2]
        xs = x[r.sorted_tok]
        h = gm(xs, w1.transpose(1, 2), offs=r.offs)
        a = F.silu(h[:, :I]) * h[:, I:]
        y = gm(a, w2.transpose(1, 2), offs=r.offs).float() * r.sorted_w.unsqueeze(1)
        acc = torch.zeros(out.shape, dtype=torch.float32, device=x.device)
        acc.index_add_(0, r.sorted_tok, y)
        out.copy_(acc)
    return run, ""


def load_triton_peer(path):
    """fused_experts from a .py file, or a folder holding triton_moe_ref.py
    or a package (__init__.py)."""
    import importlib.util
    path = os.path.abspath(path)
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "triton_moe_ref.py")):
            path = os.path.join(path, "triton_moe_ref.py")
        elif os.path.exists(os.path.join(path, "__init__.py")):
            path = os.path.join(path, "__init__.py")
        else:
            raise ImportError(f"{path}: a folder with neither triton_moe_ref.py nor __init__.py")
    if not os.path.exists(path):
        raise ImportError(f"{path}: no such file")
    spec = importlib.util.spec_from_file_location("mstar_triton_peer", path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(path))
    spec.loader.exec_module(mod)
    fe = getattr(mod, "fused_experts", None)
    if fe is None:
        raise ImportError(f"{path} defines no fused_experts")
    return fe


def impl_triton_ref(path):
    try:
        fe = load_triton_peer(path)
    except Exception as ex:  # noqa: BLE001 - any import failure means "not available"
        return None, f"--triton-peer {path}: {ex.__class__.__name__}: {ex}"

    def run(x, w1, w2, r, out):
        out.copy_(fe(x, w1, w2, r.topk_w, r.topk_ids, inplace=False))
    return run, ""


def bmm_sizes(E, slots):
    """cublas-bmm's balanced slots: min(E, slots) experts, the slots spread
    over them (rounded up)."""
    experts = max(1, min(E, slots))
    return experts, max(1, -(-slots // experts))


class BMM:
    """The layer's two GEMMs as cuBLAS batched GEMMs over balanced slots."""

    def __init__(self, torch, M, K, E, H, I, slots, dev):
        self.experts, self.t = bmm_sizes(E, slots)
        g = torch.Generator(device=dev)
        g.manual_seed(7)
        self.a1 = (torch.randn(self.experts, self.t, H, device=dev, generator=g) * 0.5).to(torch.bfloat16)
        self.a2 = (torch.randn(self.experts, self.t, I, device=dev, generator=g) * 0.5).to(torch.bfloat16)
        self.h = torch.empty(self.experts, self.t, 2 * I, dtype=torch.bfloat16, device=dev)
        self.y = torch.empty(self.experts, self.t, H, dtype=torch.bfloat16, device=dev)
        self.note = f"cublas-bmm: a bound, GEMMs only: {self.experts} experts x {self.t} tokens, no alignment/activation/combine"

    def run(self, torch):
        def fn(x, w1, w2, r, out):
            n = self.experts
            torch.bmm(self.a1, w1[:n].transpose(1, 2), out=self.h)
            torch.bmm(self.a2, w2[:n].transpose(1, 2), out=self.y)
        return fn

    def check(self, torch, w1, w2):
        """rel L2 of expert 0's two GEMMs against float64."""
        h = torch.bmm(self.a1[:1], w1[:1].transpose(1, 2))
        y = torch.bmm(self.a2[:1], w2[:1].transpose(1, 2))
        rh = rel_l2(h, self.a1[0].double() @ w1[0].double().t())
        ry = rel_l2(y, self.a2[0].double() @ w2[0].double().t())
        return max(rh, ry)


def impl_triton(torch):
    errs = []
    try:
        from sglang.srt.layers.moe.fused_moe_triton.fused_moe import fused_experts as fe
        name = "sglang"
    except Exception as ex:  # noqa: BLE001 - any import failure means "not available"
        errs.append(f"sglang: {ex.__class__.__name__}: {ex}")
        try:
            from vllm.model_executor.layers.fused_moe import fused_experts as fe
            name = "vllm"
        except Exception as ex2:  # noqa: BLE001
            errs.append(f"vllm: {ex2.__class__.__name__}: {ex2}")
            return None, "", "neither sglang nor vLLM is importable (" + "; ".join(errs) + ")"

    def run(x, w1, w2, r, out):
        out.copy_(fe(x, w1, w2, r.topk_w, r.topk_ids, inplace=False))
    return run, name, ""


# ---------------------------------------------------------------- timing and checks

def rotation_copies(touched_bytes, l2_bytes, max_copies=8):
    if touched_bytes <= 0 or l2_bytes <= 0:
        return 1
    return max(1, min(int((2 * l2_bytes) // touched_bytes) + 1, max_copies))


# The warm-up rule of mstar's own GPU timing (bench.Settle, as bench moe sets
# it): replay for at least 0.1 s and 6 replays, until the median of the last
# 3 replays is within 5% of the 3 before, at most 3 s. One warm replay was
# not enough: on the H200 a peer's 20 samples climbed from 768 to 856 µs as
# the GPU reached its power cap (qwen3-30b-a3b M=4096, 2026-12-03), while
# mstar's, taken after this warm-up, held one level.
SETTLE_MIN_S, SETTLE_MAX_S, SETTLE_MIN_CALLS, SETTLE_WINDOW, SETTLE_TOL = 0.1, 3.0, 6, 3, 0.05


def settled(times, elapsed):
    """The warm-up is over: (done, why), as bench.Settler.Add says it."""
    n, w = len(times), SETTLE_WINDOW
    if elapsed >= SETTLE_MAX_S:
        return True, f"not settled after {n} replays in {elapsed:.2f} s"
    if n < SETTLE_MIN_CALLS or elapsed < SETTLE_MIN_S:
        return False, ""
    last, before = sorted(times[n - w:])[w // 2], sorted(times[n - 2 * w:n - w])[w // 2]
    if before * (1 - SETTLE_TOL) <= last <= before * (1 + SETTLE_TOL):
        return True, f"settled after {n} replays in {elapsed:.2f} s"
    return False, ""


def time_graph(torch, fn, copies, samples):
    """µs per call: eager warm-up, a graph of >= ~3 ms of calls rotating
    through the weight copies, replays until the timing settles (above),
    then `samples` replays. Returns the samples, calls per graph and how
    the warm-up ended."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in copies:
            fn(*c)
    torch.cuda.current_stream().wait_stream(s)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for c in copies:
        fn(*c)
    stop.record()
    stop.synchronize()
    est = start.elapsed_time(stop) * 1000 / len(copies)
    calls = min(max(int(3000 / max(est, 1)), 8), 256)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(*copies[i % len(copies)])
    torch.cuda.synchronize()

    def replay():
        start.record()
        g.replay()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1000 / calls

    warm, t0 = [], time.perf_counter()
    while True:
        warm.append(replay())
        done, why = settled(warm, time.perf_counter() - t0)
        if done:
            break
    return [replay() for _ in range(samples)], calls, why


def reference_rows(torch, x, w1, w2, r, tokens):
    """float64 reference for the listed tokens, from the bf16 values; each
    touched expert's weights are widened once."""
    I = w2.shape[2]
    H = x.shape[1]
    ref = torch.zeros(len(tokens), H, dtype=torch.float64, device=x.device)
    ids, w = r.ids.tolist(), r.w.tolist()
    by_expert = {}
    for row, m in enumerate(tokens):
        for j, e in enumerate(ids[m]):
            if e >= 0:
                by_expert.setdefault(e, []).append((row, m, w[m][j]))
    for e, uses in by_expert.items():
        rows = torch.tensor([u[0] for u in uses], device=x.device)
        xs = x[torch.tensor([u[1] for u in uses], device=x.device)].double()
        h = xs @ w1[e].double().t()
        a = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
        y = (a @ w2[e].double().t()) * torch.tensor([u[2] for u in uses], dtype=torch.float64, device=x.device).unsqueeze(1)
        ref.index_add_(0, rows, y)
    return ref


def rel_l2(got, want):
    num = torch_norm(got.double() - want)
    den = torch_norm(want)
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def torch_norm(t):
    return float(t.double().pow(2).sum().sqrt().item())


# ---------------------------------------------------------------- results

def metric(name, unit, better, samples=None, unmeasured=None):
    m = {"name": name, "unit": unit, "better": better}
    if unmeasured:
        m["unmeasured"] = unmeasured
    else:
        m["samples"] = samples
    return m


def ceilings_of(doc):
    c = {}
    for r in doc.get("results", []):
        if r.get("name") == "ceiling" and r["metrics"] and r["metrics"][0].get("samples"):
            s = sorted(r["metrics"][0]["samples"])
            c[r["params"]["what"]] = s[len(s) // 2]
    return c


def result_for(params, impl, us, H, I, M, touched, slots, ceil, rel, rel_mstar, note):
    fl, by = flops(H, I, slots), bytes_moved(H, I, M, touched, slots)
    p = {k: v for k, v in params.items() if k not in ("config", "config_source")}  # mstar's kernels, not the peer's
    p["impl"] = impl
    if us is None:
        reason = note
        ms = [metric(n, u, b, unmeasured=reason) for n, u, b in [
            ("latency", "µs", "lower"), ("throughput", "TFLOP/s", "higher"), ("bandwidth", "GB/s", "higher")]]
        return {"name": "moe", "params": p, "metrics": ms}
    tf = [fl / (u * 1e-6) / 1e12 for u in us]
    gb = [by / (u * 1e-6) / 1e9 for u in us]
    ms = [metric("latency", "µs", "lower", us), metric("throughput", "TFLOP/s", "higher", tf),
          metric("bandwidth", "GB/s", "higher", gb)]
    for name, key, vals in [("pct_bw_ceiling", "d2d", gb), ("pct_compute_ceiling", "gemm", tf)]:
        if key in ceil:
            ms.append(metric(name, "%", "higher", [100 * v / ceil[key] for v in vals]))
        else:
            ms.append(metric(name, "%", "higher", unmeasured=f"no {key} ceiling in the mstar document"))
    if "d2d" in ceil and "gemm" in ceil:
        floor = max(by / (ceil["d2d"] * 1e9), fl / (ceil["gemm"] * 1e12))
        ms.append(metric("pct_floor", "%", "higher", [100 * floor / (u * 1e-6) for u in us]))
    else:
        ms.append(metric("pct_floor", "%", "higher", unmeasured="needs both the d2d and gemm ceilings"))
    if math.isfinite(rel):
        ms.append(metric("rel_l2", "", "lower", [rel]))
    else:
        ms.append(metric("rel_l2", "", "lower", unmeasured=f"output not finite ({rel})"))
    if rel_mstar is not None:
        ms.append(metric("rel_l2_vs_mstar", "", "lower", [rel_mstar] if math.isfinite(rel_mstar) else None,
                         None if math.isfinite(rel_mstar) else f"not finite ({rel_mstar})"))
    ok = rel <= MAX_REL_L2
    reason = f"rel L2 {rel:.3g} against the float64 reference on {len(check_tokens(M))} of {M} tokens (limit {MAX_REL_L2:g}); {note}"
    if impl == "cublas-bmm":
        reason = f"rel L2 {rel:.3g} of expert 0's two GEMMs against float64 (limit {MAX_REL_L2:g}); {note}"
    return {"name": "moe", "params": p, "metrics": ms, "gates": [{"name": "correctness", "pass": ok, "reason": reason}]}


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--mstar", help="mstar's results document (bench moe --out)")
    ap.add_argument("--routing", help="the routing mstar used (bench moe --routing-out)")
    ap.add_argument("--dump-dir", help="mstar's --dump-dir, for the cross-check against mstar's outputs")
    ap.add_argument("--out", help="write the peers' results document here")
    ap.add_argument("--impls", default="loop,grouped,triton,bmm", help="comma-separated: loop, grouped, triton, bmm (cublas-bmm); triton-ref is added by --triton-peer")
    ap.add_argument("--triton-peer", default=os.environ.get("MSTAR_TRITON_PEER", ""),
                    help="a .py file, or a folder holding triton_moe_ref.py or a package, whose fused_experts runs as 'triton-ref' (default: $MSTAR_TRITON_PEER)")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--min-copies", type=int, default=1, help="rotate through at least this many weight copies (mstar's --weight-copies)")
    ap.add_argument("--batches", default="", help="only these batch sizes (default: every batch in the mstar document)")
    ap.add_argument("--selftest", action="store_true", help="check the generator against mstar's golden values and exit")
    args = ap.parse_args()

    selftest_py()
    if args.selftest and not args.mstar:
        try:
            import torch
            selftest_torch(torch, "cuda" if torch.cuda.is_available() else "cpu")
            print("generator: pure python and torch match mstar's golden values")
        except ImportError:
            print("generator: pure python matches mstar's golden values (torch not installed)")
        return 0
    if not (args.mstar and args.routing and args.out):
        ap.error("--mstar, --routing and --out are required")

    import torch
    import torch.nn.functional as F
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    selftest_torch(torch, dev)

    with open(args.mstar) as f:
        mdoc = json.load(f)
    if mdoc.get("format") != "mstar.results" or mdoc.get("schema") != 1:
        raise SystemExit(f"{args.mstar}: not an mstar results document of schema 1")
    trace = read_routing(args.routing)
    ceil = ceilings_of(mdoc)
    only = {int(b) for b in args.batches.split(",") if b}
    rows = [r for r in mdoc["results"] if r["name"] == "moe" and r["params"].get("impl") == "mstar"
            and (not only or int(r["params"]["batch"]) in only)]
    if not rows:
        raise SystemExit(f"{args.mstar}: no mstar moe results")
    p0 = rows[0]["params"]
    E, K, H, I = (int(p0[k]) for k in ("experts", "topk", "hidden", "inter"))
    ep, seed = int(p0["ep"]), int(p0["seed"])
    if trace["topk"] != K or trace["experts"] != E * ep:
        raise SystemExit(f"{args.routing}: routing over {trace['experts']} experts top-{trace['topk']}, mstar ran E={E}x{ep} k={K}")
    maxM = max(int(r["params"]["batch"]) for r in rows)
    if len(trace["ids"]) < maxM:
        raise SystemExit(f"{args.routing}: {len(trace['ids'])} tokens, mstar ran up to {maxM}")

    start = datetime.datetime.now(datetime.timezone.utc)
    warnings = [f"peers: torch {torch.__version__}, CUDA {torch.version.cuda}, device {torch.cuda.get_device_name()}"]
    w1, w2 = make_layer(torch, E, H, I, seed, dev)
    xall = make_x(torch, maxM, H, seed, dev)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    impls = []
    names = [n for n in args.impls.split(",") if n]
    if args.triton_peer and "triton-ref" not in names:
        names.append("triton-ref")
    use_bmm = False
    for name in names:
        if name == "loop":
            impls.append(("torch-loop", impl_loop(torch, F), ""))
        elif name == "grouped":
            fn, why = impl_grouped(torch, F)
            impls.append(("torch-grouped_mm", fn, why))
        elif name == "bmm":
            use_bmm = True
        elif name == "triton-ref":
            if not args.triton_peer:
                raise SystemExit("--impls triton-ref needs --triton-peer PATH (or $MSTAR_TRITON_PEER)")
            fn, why = impl_triton_ref(args.triton_peer)
            impls.append(("triton-ref", fn, why))
            if fn:
                warnings.append(f"triton-ref: fused_experts from {os.path.abspath(args.triton_peer)}")
        elif name == "triton":
            fn, lib, why = impl_triton(torch)
            impls.append((f"triton-fused_moe-{lib}" if fn else "triton-fused_moe", fn, why))
            if fn:
                warnings.append(f"triton fused_moe from {lib}")
        else:
            raise SystemExit(f"--impls: unknown {name!r}")

    results = []
    copies_cache = [(w1, w2)]

    def write_doc(partial):
        """The document so far, replaced atomically: a run stopped between
        batches (mstar's timeout or Ctrl-C) leaves the batches it finished."""
        doc = {
            "format": "mstar.results", "schema": 1, "suite": "bench moe peers",
            "command": [sys.executable] + sys.argv,
            "start": start.isoformat(), "end": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "env": mdoc.get("env", {}), "results": results, "warnings": warnings + ([partial] if partial else []),
        }
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, args.out)

    batches = sorted(rows, key=lambda r: int(r["params"]["batch"]))
    for bi, r in enumerate(batches):
        M = int(r["params"]["batch"])
        ids = localize(trace["ids"][:M], E * ep, ep)
        wts = trace["weights"][:M] if trace.get("weights") else [[1.0 / K] * K for _ in range(M)]
        rt = Routing(torch, ids, wts, E, dev)
        x = xall[:M].contiguous()
        tokens = check_tokens(M)
        ref = reference_rows(torch, x, w1, w2, rt, tokens)
        mstar_out = None
        if args.dump_dir:
            path = os.path.join(args.dump_dir, f"out-M{M}.bf16")
            if os.path.exists(path):
                raw = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.bfloat16)
                mstar_out = raw.view(M, H).to(dev)
        n = max(rotation_copies(rt.touched * 3 * I * H * 2, l2), args.min_copies)
        while len(copies_cache) < n:
            copies_cache.append((w1.clone(), w2.clone()))
        batch_impls = list(impls)
        bmm = None
        if use_bmm:
            try:
                bmm = BMM(torch, M, K, E, H, I, rt.slots, dev)
                batch_impls.append(("cublas-bmm", bmm.run(torch), ""))
            except Exception as ex:  # noqa: BLE001
                batch_impls.append(("cublas-bmm", None, f"cublas-bmm: {ex.__class__.__name__}: {str(ex)[:300]}"))
        for impl, fn, why in batch_impls:
            if fn is None:
                results.append(result_for(r["params"], impl, None, H, I, M, rt.touched, rt.slots, ceil, math.nan, None, why))
                continue
            out = torch.full((M, H), float("nan"), dtype=torch.bfloat16, device=dev)
            try:
                fn(x, w1, w2, rt, out)
                torch.cuda.synchronize()
                if impl == "cublas-bmm":
                    rel, rel_m = bmm.check(torch, w1, w2), None
                else:
                    got = out[tokens]
                    rel = rel_l2(got, ref)
                    rel_m = rel_l2(out, mstar_out.double()) if mstar_out is not None else None
                outs = [torch.empty_like(out) for _ in range(n)]
                calls_args = [(x, copies_cache[i][0], copies_cache[i][1], rt, outs[i]) for i in range(n)]
                us, calls, warm = time_graph(torch, fn, calls_args, args.samples)
                note = f"{impl}, {calls} calls per graph, {n} weight copies, warm-up {warm}"
                if impl == "cublas-bmm":
                    note = f"{bmm.note}, {calls} calls per graph, {n} weight copies, warm-up {warm}"
                results.append(result_for(r["params"], impl, us, H, I, M, rt.touched, rt.slots, ceil, rel, rel_m, note))
                su = sorted(us)  # the document keeps the samples in the order measured
                print(f"{p0['model']:16s} M={M:<5d} {impl:28s} {su[len(su)//2]:10.1f} us  rel_l2 {rel:.2g}"
                      + (f"  vs mstar {rel_m:.2g}" if rel_m is not None else ""), flush=True)
            except Exception as ex:  # noqa: BLE001 - a peer that fails is reported, not fatal
                torch.cuda.synchronize()
                results.append(result_for(r["params"], impl, None, H, I, M, rt.touched, rt.slots, ceil, math.nan, None,
                                          f"{impl} failed: {ex.__class__.__name__}: {str(ex)[:300]}"))
                print(f"{p0['model']:16s} M={M:<5d} {impl:28s} failed: {ex}", flush=True)
        if bi + 1 < len(batches):
            write_doc(f"peers stopped early: {bi + 1} of {len(batches)} batches measured (up to M={M})")

    write_doc(None)
    failed = [r for r in results if any(not g["pass"] for g in r.get("gates", []))]
    for r in failed:
        print("correctness gate failed:", r["params"]["impl"], "M=" + r["params"]["batch"], r["gates"][0]["reason"], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
