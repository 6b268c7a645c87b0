// kiln: force-included into the host-only objects of a static library built per
// target (docs/static-library.md). Such an object carries no kernels (each sm's come
// as a cubin module), so nvcc compiles its device pass for one cheap arch only, and
// would tell the host pass that this one arch is all there is: `__CUDA_ARCH_LIST__`.
// candle's MMQ host code chooses its tile geometry from that list
// (ggml_cuda_highest_compiled_arch), and must choose what the cubins were compiled
// for. So the host pass gets the library's whole pinned list, which kiln passes as
// KILN_HOST_ARCH_LIST (e.g. 700,750,800,860,890,900), exactly what nvcc defines when
// it builds one fat object for all of them.
#if !defined(__CUDA_ARCH__) && defined(KILN_HOST_ARCH_LIST)
#undef __CUDA_ARCH_LIST__
#define __CUDA_ARCH_LIST__ KILN_HOST_ARCH_LIST
#endif
