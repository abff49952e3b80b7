// Microbenchmark: a chain of short kernels in a CUDA graph, with and without
// programmatic dependent launch. Prints µs per kernel boundary.
#include <cstdio>
#include <cuda_runtime.h>
__global__ void work(float* buf, int iters, int pdl) {
  if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (pdl) asm volatile("griddepcontrol.launch_dependents;");
  float v = buf[blockIdx.x * blockDim.x + threadIdx.x];
  for (int i = 0; i < iters; i++) v = v * 0.999f + 0.001f;
  buf[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
int main() {
  float* buf; cudaMalloc(&buf, 1 << 24);
  cudaStream_t s; cudaStreamCreate(&s);
  int blocks[] = {132, 264, 1056};
  int iters[] = {0, 2000, 20000};
  for (int b : blocks) for (int it : iters) for (int pdl = 0; pdl < 2; pdl++) {
    const int chain = 64;
    cudaGraph_t g; cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < chain; i++) {
      cudaLaunchConfig_t cfg = {}; cfg.gridDim = b; cfg.blockDim = 256; cfg.stream = s;
      cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = a; cfg.numAttrs = pdl;
      cudaError_t e = cudaLaunchKernelEx(&cfg, work, buf, it, pdl);
      if (e) { printf("launch: %s\n", cudaGetErrorString(e)); return 1; }
    }
    cudaError_t e = cudaStreamEndCapture(s, &g); if (e) { printf("capture: %s\n", cudaGetErrorString(e)); return 1; }
    e = cudaGraphInstantiate(&ge, g, 0); if (e) { printf("inst: %s\n", cudaGetErrorString(e)); return 1; }
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaGraphLaunch(ge, s); cudaStreamSynchronize(s);
    float best = 1e9;
    for (int r = 0; r < 20; r++) {
      cudaEventRecord(e0, s); cudaGraphLaunch(ge, s); cudaEventRecord(e1, s); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1); if (ms < best) best = ms;
    }
    printf("blocks %5d iters %6d pdl %d: %.2f us/kernel\n", b, it, pdl, best * 1000 / chain);
    cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  }
  printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
}
