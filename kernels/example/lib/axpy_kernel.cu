// The kernel behind example_axpy, and its launcher (called from axpy_api.cu,
// another object of the same static library).
#include <cuda_runtime.h>

#include "../example_common.cuh"

__global__ void example_axpy_kernel(float a, const float *x, float *y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] += a * x[i];
    }
}

extern "C" int example_launch_axpy(float a, const float *x, float *y, unsigned int n, cudaStream_t stream) {
    unsigned int blocks = (n + EXAMPLE_BLOCK - 1) / EXAMPLE_BLOCK;
    example_axpy_kernel<<<blocks, EXAMPLE_BLOCK, 0, stream>>>(a, x, y, n);
    return (int)cudaGetLastError();
}
