import torch
E, S, H, I = 128, 256, 2048, 768
x = torch.randn(E, S, H, device="cuda", dtype=torch.bfloat16)
w1 = torch.randn(E, H, 2 * I, device="cuda", dtype=torch.bfloat16) * 0.02
a = torch.randn(E, S, I, device="cuda", dtype=torch.bfloat16)
w2 = torch.randn(E, I, H, device="cuda", dtype=torch.bfloat16) * 0.02
for _ in range(3):
    torch.bmm(x, w1); torch.bmm(a, w2)
torch.cuda.synchronize()
torch.cuda.profiler.start()
torch.bmm(x, w1); torch.bmm(a, w2)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
