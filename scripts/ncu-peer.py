#!/usr/bin/env python3
"""ncu-peer.py — a peer's GEMMs for scripts/moe-ncu-h200.sh, one call of them
between cudaProfilerStart and Stop after a warm-up (run it under
ncu --profile-from-start off), over the same sizes bench moe's peers use:

  ncu-peer.py bmm SHAPE M       cuBLAS batched GEMMs over balanced slots, as
                                the cublas-bmm peer times them: min(E, M*k)
                                experts x ceil(M*k / experts) tokens each
  ncu-peer.py triton SHAPE M    triton-ref's fused_experts (--triton-peer,
                                default .dev/peers) over uniform routing,
                                after its own tuning for that batch
  ncu-peer.py --dry-run ...     print the sizes and exit (no torch needed)

SHAPE: qwen3-30b, qwen3-235b, deepseek (tp 8) or mixtral. The cuBLAS GEMV
that bmm runs at deepseek M=1 reads the weights at ~3.3 TB/s, where mstar's
decode kernels read ~2.5 (kernels/moe/NOTES.md): its counters beside
mstar's say which access pattern the next decode kernel needs."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers.moe_peers import BMM, bmm_sizes, load_triton_peer  # noqa: E402 - after the path

# E, H (hidden), I (intermediate per expert, after tp), top-k
SHAPES = {
    "qwen3-30b": (128, 2048, 768, 8),
    "qwen3-235b": (128, 4096, 1536, 8),
    "deepseek": (256, 7168, 256, 8),
    "mixtral": (8, 4096, 14336, 2),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("peer", choices=["bmm", "triton"])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("M", type=int)
    ap.add_argument("--triton-peer", default=".dev/peers")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    if a.M < 1:
        ap.error(f"M must be at least 1, got {a.M}")
    E, H, I, k = SHAPES[a.shape]
    if a.peer == "bmm":
        n, t = bmm_sizes(E, a.M * k)
        what = f"bmm {a.shape} M={a.M}: {n} experts x {t} tokens, gemm1 [{t}x{H}]·[{H}x{2 * I}], gemm2 [{t}x{I}]·[{I}x{H}]"
    else:
        what = f"triton-ref {a.shape} M={a.M}: E={E} H={H} I={I} top-{k}, uniform routing"
    print(what, flush=True)
    if a.dry_run:
        return
    import torch
    dev = "cuda"
    g = torch.Generator(device=dev)
    g.manual_seed(7)
    if a.peer == "bmm":
        # The peer's own code, over the n experts it touches.
        w1 = (torch.randn(n, 2 * I, H, device=dev, generator=g) * 0.02).to(torch.bfloat16)
        w2 = (torch.randn(n, H, I, device=dev, generator=g) * 0.02).to(torch.bfloat16)
        run = BMM(torch, a.M, k, E, H, I, a.M * k, dev).run(torch)

        def call():
            run(None, w1, w2, None, None)
    else:
        fe = load_triton_peer(a.triton_peer)
        x = torch.randn(a.M, H, device=dev, generator=g).to(torch.bfloat16)
        w1 = (torch.randn(E, 2 * I, H, device=dev, generator=g) * 0.02).to(torch.bfloat16)
        w2 = (torch.randn(E, H, I, device=dev, generator=g) * 0.02).to(torch.bfloat16)
        ids = torch.argsort(torch.rand(a.M, E, device=dev, generator=g), dim=1)[:, :k].to(torch.int32)
        w = torch.softmax(torch.rand(a.M, k, device=dev, generator=g), dim=1)

        def call():
            fe(x, w1, w2, w, ids, inplace=False)
    for _ in range(3):  # triton-ref tunes on the first call
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
