#pragma once
// Shared-memory mbarriers (sm_90; PTX ISA "mbarrier"): initialization, arrival (plain, or with the
// byte count an asynchronous copy will complete: TMA, cuda/common/tma.cuh), and a bounded wait on a
// phase parity. Used by the attention v3/v4 producer and consumers and the indexer's prefill v3.
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// The shared-memory (shared::cta) address of a generic pointer into shared memory, as the functions
// below (and the TMA and wgmma descriptors) take it.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// `bar`: the shared-memory (shared::cta) address of a 64-bit mbarrier, 8-byte aligned.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initializations visible to the other threads' mbarrier operations (then __syncthreads).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrives (release: this thread's earlier writes are visible to a thread that then sees the phase
// complete).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives and adds `bytes` to the transaction count of the current phase: the phase completes when
// every expected arrival has happened and asynchronous copies have completed that many bytes on it.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
// Waits (acquire) until the phase of parity `parity` has completed. A wait that never ends (a
// protocol bug: an arrive missing) traps after 2^25 tries (each try suspends up to a system time
// limit: seconds at the least, far beyond any legitimate wait here, racecheck's slowdown included),
// so that the launch fails with an error instead of hanging the test run. The loop is PTX: a C++ loop around
// try_wait made ptxas lose the registers of the consumers' setmaxnreg region (wgmma serialized).
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done, more;\n.reg .u32 tries;\nmov.u32 tries, 0;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@done bra DONE;\n"
      "add.u32 tries, tries, 1;\n"
      "setp.lt.u32 more, tries, 33554432;\n"
      "@more bra WAIT;\n"
      "trap;\n"
      "DONE:\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

}  // namespace dsv4::cuda
