// y[i] = a * x[i]: the smallest kernel that reads, computes and writes.
extern "C" __global__ void example_scale_f32(const float *x, float *y, float a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i];
    }
}

extern "C" __global__ void example_scale_f64(const double *x, double *y, double a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i];
    }
}
