// The library's C entry point (what ffi.rs declares): checks its arguments and
// calls the launcher in axpy_kernel.cu.
#include <cuda_runtime.h>

extern "C" int example_launch_axpy(float a, const float *x, float *y, unsigned int n, cudaStream_t stream);

extern "C" int example_axpy(float a, const float *x, float *y, unsigned int n, void *stream) {
    if (n == 0) {
        return 0;
    }
    if (x == nullptr || y == nullptr) {
        return (int)cudaErrorInvalidValue;
    }
    return example_launch_axpy(a, x, y, n, (cudaStream_t)stream);
}
