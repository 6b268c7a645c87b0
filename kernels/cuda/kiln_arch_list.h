// kiln: force-included into every compile of a static library built per target
// (docs/static-library.md): its host-only objects and each sm's cubin.
//
// nvcc defines `__CUDA_ARCH_LIST__` as the archs of the one compile: a fat object for
// sm_70...sm_90 sees 700,750,800,860,890,900 in every pass; a cubin for sm_90 alone
// would see 900, and a host-only object (one cheap device arch) 700. Sources read it:
// candle's MMQ host code chooses its tile geometry from it
// (ggml_cuda_highest_compiled_arch), and CUB/Thrust spell it into their namespaces,
// hence into the mangled names of their kernels. So every pass of every such compile
// gets the library's whole pinned list, passed as KILN_ARCH_LIST (e.g.
// 700,750,800,860,890,900): the host picks the geometry the cubins were compiled for,
// and the host's kernel names are the cubins' names, exactly as in one fat object.
#if defined(KILN_ARCH_LIST)
#undef __CUDA_ARCH_LIST__
#define __CUDA_ARCH_LIST__ KILN_ARCH_LIST
#endif
