// probe.cuh — what the probes of this folder share (each is one nvcc
// command: nvcc finds this header beside the source).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

// CK exits with the failing call, its file and line, and CUDA's reason.
#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)
