// One partial sum per block, in shared memory (a tree reduction): out[blockIdx.x]
// is the sum of that block's EXAMPLE_BLOCK elements of x. Launched with
// EXAMPLE_BLOCK threads per block.
#include "example_common.cuh"

extern "C" __global__ void example_block_sum_f32(const float *x, float *out, unsigned int n) {
    __shared__ float part[EXAMPLE_BLOCK];
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    part[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            part[threadIdx.x] += part[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[blockIdx.x] = part[0];
    }
}
