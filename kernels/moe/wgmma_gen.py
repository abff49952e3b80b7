# Prints moe.cu's wgmma wrappers: one inline-asm statement per N (the
# accumulator fragment is N/2 registers, which C cannot spell as an array operand).
for n in (64, 128, 256):
    r = n // 2
    regs = ",".join(f"%{i}" for i in range(r))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(r))
    print(f"__device__ __forceinline__ void wgmma_n{n}(float (&d)[{r}], u64 da, u64 db, int scale_d) {{")
    print(f'    asm volatile(\n        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{r+2}, 0;\\n"')
    print(f'        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, %{r}, %{r+1}, p, 1, 1, 0, 0;\\n}}\\n"')
    print(f"        : {outs}")
    print(f'        : "l"(da), "l"(db), "r"(scale_d));')
    print("}")
