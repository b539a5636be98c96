#pragma once
// Per-warpgroup register budgets (sm_90a; PTX ISA "setmaxnreg"): a producer warpgroup gives
// registers back to the pool, the consumer warpgroups take them. Every warp of the warpgroup
// executes the instruction; the budgets of a CTA must fit the registers it was launched with.
#include <cuda_runtime.h>

namespace dsv4::cuda {

template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

}  // namespace dsv4::cuda
