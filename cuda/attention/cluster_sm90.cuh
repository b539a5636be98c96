#pragma once
// The distributed shared memory of a 2-CTA cluster (sm_90; PTX ISA "mapa", "st", "mbarrier.arrive",
// "barrier.cluster"), as attention v8 uses it: the peer CTA's address of a local shared-memory
// location, stores and mbarrier arrivals there, and the cluster-wide barrier.
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::attention::cluster {

__device__ __forceinline__ uint32_t cta_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// The shared::cluster address, in CTA `rank`, of the location at shared::cta address `local` of this CTA
// (the same offset in the other CTA's window; the window is contiguous, so offsets may be added to it).
__device__ __forceinline__ uint32_t peer_address(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

__device__ __forceinline__ void store_v4(uint32_t remote, uint4 v) {
  asm volatile("st.shared::cluster.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(remote), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void store_u8(uint32_t remote, uint32_t v) {
  asm volatile("st.shared::cluster.u8 [%0], %1;\n" ::"r"(remote), "r"(v) : "memory");
}

// Arrives on the mbarrier at shared::cluster address `remote` (another CTA's) with release at cluster
// scope: this thread's earlier writes (and those ordered before them, e.g. by __syncwarp) are visible to
// a thread of that CTA that then sees the phase complete with mbarrier_wait<true> (acquire.cluster).
__device__ __forceinline__ void mbarrier_arrive_peer(uint32_t remote) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}

// Every thread of both CTAs: the peer's mbarriers initialized before any remote arrival (start), and no
// CTA exits while the peer may still arrive on its mbarriers (end).
__device__ __forceinline__ void sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

}  // namespace dsv4::cuda::attention::cluster
