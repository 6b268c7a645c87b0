// kiln: force-included (nvcc -include) into every object of the static MoE/MMQ
// library, for every arch of the one fat object.
//
// Upstream's build.rs builds the library for one GPU and, below sm_80, defines
// NO_BF16_KERNEL for the whole build: the bf16 WMMA MoE kernels need Ampere's
// bf16 fragments and do not compile for Volta or Turing. kiln builds one
// library for every pinned sm, so it makes the same choice per arch: in each
// device pass below sm_80, exactly as upstream's build for that GPU would.
// The host pass keeps the bf16 launch path; on a GPU below sm_80 its kernels
// are absent from the image, as upstream's are.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800 && !defined(NO_BF16_KERNEL)
#define NO_BF16_KERNEL
#endif
