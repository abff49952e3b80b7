#!/usr/bin/env python3
"""ncu-bmm.py — the cuBLAS bound of scripts/moe-ncu-h200.sh's bmm case:
torch.bmm of qwen3-30b-a3b at M=4096, 128 experts × 256 slots each,
gemm1 [256×2048]·[2048×1536] and gemm2 [256×768]·[768×2048] in bf16, as the
cublas-bmm peer times them; profiled between cudaProfilerStart and Stop,
after a warm-up (run under ncu --profile-from-start off)."""
import torch

E, S, H, I = 128, 256, 2048, 768
x = torch.randn(E, S, H, device="cuda", dtype=torch.bfloat16)
w1 = torch.randn(E, H, 2 * I, device="cuda", dtype=torch.bfloat16) * 0.02
a = torch.randn(E, S, I, device="cuda", dtype=torch.bfloat16)
w2 = torch.randn(E, I, H, device="cuda", dtype=torch.bfloat16) * 0.02
for _ in range(3):
    torch.bmm(x, w1)
    torch.bmm(a, w2)
torch.cuda.synchronize()
torch.cuda.profiler.start()
torch.bmm(x, w1)
torch.bmm(a, w2)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
