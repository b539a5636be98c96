#pragma once
// v5's persistent CTA, shared by v5 and v7 (sm_90a; docs/cuda-attention.md "v5", "v7"): the
// shared-memory setup and mbarriers, the producer warpgroup walking the CTA's work units
// (v5_producer.cuh) and the two consumer warpgroups in ping-pong calling the version's consumer, the
// register budgets, and the host launch of min(work units, SMs) CTAs followed by the split combine.
// A version supplies its consumer (one work unit of one consumer warpgroup) and its own __global__
// entry (so that each kernel keeps its name).
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/attention/cluster_sm90.cuh"
#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/split_combine.cuh"
#include "cuda/attention/v4_pieces.cuh"
#include "cuda/attention/v5_producer.cuh"
#include "cuda/common/cuda_check.h"

namespace dsv4::cuda::attention::detail::v5_grid {

using namespace v3;
using v5::Smem;

// Register budgets (setmaxnreg): the producers hold addresses only (no loaded bytes), so both give
// the consumers v4's prefill budget.
constexpr int kProducerRegs = 88, kConsumerRegs = 208;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * 168,
              "the warpgroups' registers fit what a 384-thread block is launched with (168 each)");
// Ping-pong as v4 (named barriers kTurn + c), once for the whole CTA: consumer 1 arrives on kTurn
// before its first block, consumer 0 syncs on it after its last one.
constexpr int kTurn = 2;

struct UnitRange {
  int64_t row;
  int head_base, split, begin, end;
};

// Work unit u (query row, 64-head group, split) and its range [begin, end) of 64-slot blocks.
template <class Params>
__device__ UnitRange unit_range(const Params& p, int u, int splits) {
  const v5::Unit w = v5::unit_of(u, p.n_heads / layout::kRows, splits);
  const auto rs = p.row_slots(w.row);
  const int n_blocks = (rs.total() + layout::kRows - 1) / layout::kRows;
  const int per_split = (n_blocks + splits - 1) / splits;
  UnitRange r;
  r.row = w.row;
  r.head_base = w.group * layout::kRows;
  r.split = w.split;
  r.begin = min(n_blocks, w.split * per_split);
  r.end = min(n_blocks, r.begin + per_split);
  return r;
}

// v8's pairing: the two CTAs of a cluster take the two 64-head groups (rank = group) of the same
// (query row, split) units in the same order, so that both count the same blocks n.
// Pair unit i (row i / splits, split i % splits) -> the work unit of head group `rank`.
__device__ __forceinline__ int pair_unit(int i, int rank, int splits) {
  return ((i / splits) * 2 + rank) * splits + i % splits;
}

// The CTA's body. consume_unit(p, m, u, splits, ws, n): one work unit u of the calling consumer
// warpgroup, n the CTA's block count so far (both sides count the same blocks). kPaired (v8, decode
// with 128 heads, cluster of 2): units are walked by pairs (pair_unit), the producer dequantizes half
// of each block into both CTAs (v5_producer.cuh, kParts = 4), `full` counts the 4 peer producer warps'
// arrivals and `empty` the 8 peer consumer warps', and the cluster syncs after the mbarriers' init (no
// remote arrival on an uninitialized barrier) and before exit (no arrival on an exited CTA's barrier).
template <bool kPaired = false, class Params, class ConsumeUnit>
__device__ __forceinline__ void persistent_cta(const Params& p, int splits, int units, SplitOut ws,
                                               unsigned char* smem_raw, ConsumeUnit consume_unit) {
  const uint32_t raw = mma::smem_addr(smem_raw);
  constexpr v5::Plan pl = v5::plan();
  Smem m;
  m.b.base = (raw + 1023u) & ~1023u;
  m.b.ptr = smem_raw + (m.b.base - raw);
  m.b.plan = v3::plan(0);  // q, k tiles as v3's; mask, full, empty moved to v5's plan below
  m.b.plan.mask = pl.mask;
  m.b.plan.full = pl.full;
  m.b.plan.empty = pl.empty;
  m.raw = m.b.base + pl.raw;
  m.scales = m.b.base + pl.scales;
  m.raw_ptr = m.b.ptr + pl.raw;
  m.scales_ptr = m.b.ptr + pl.scales;
  m.q_free = m.b.base + pl.q_free;

  constexpr uint32_t kPeerProducerWarps = kPaired ? 4 : 0, kPeerConsumerWarps = kPaired ? 8 : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(m.b.stage(s).full, 128 + kPeerProducerWarps);   // every producer thread
      sm90::mbarrier_init(m.b.stage(s).empty, 256 + kPeerConsumerWarps);  // every consumer thread
    }
    sm90::mbarrier_init(m.q_free, 256);  // every consumer thread, once per unit with blocks
    sm90::fence_mbarrier_init();
  }
  if constexpr (kPaired)
    cluster::sync();
  else
    __syncthreads();

  uint32_t n = 0;  // blocks of this CTA so far (both sides count the same blocks)
  if (threadIdx.x < 128) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    uint32_t units_with_blocks = 0;
    if constexpr (kPaired) {
      const uint32_t rank = cluster::cta_rank();
      const v5::PeerHalf ph{static_cast<int>(rank) * layout::kRows / 2,
                            cluster::peer_address(m.b.base, rank ^ 1u) - m.b.base};
      for (int i = static_cast<int>(blockIdx.x / 2); i < units / 2; i += static_cast<int>(gridDim.x / 2)) {
        const UnitRange r = unit_range(p, pair_unit(i, static_cast<int>(rank), splits), splits);
        v5::produce_unit<4>(p, m, r.row, p.q_row(r.row, r.head_base), r.begin, r.end, n, units_with_blocks, ph);
      }
    } else {
      for (int u = static_cast<int>(blockIdx.x); u < units; u += static_cast<int>(gridDim.x)) {
        const UnitRange r = unit_range(p, u, splits);
        v5::produce_unit(p, m, r.row, p.q_row(r.row, r.head_base), r.begin, r.end, n, units_with_blocks);
      }
    }
  } else {
    sm90::setmaxnreg_inc<kConsumerRegs>();
    const int c = static_cast<int>(threadIdx.x >> 7) - 1;
    if (c == 1) sm90::named_barrier_arrive(kTurn, 256);
    if constexpr (kPaired) {
      const int rank = static_cast<int>(cluster::cta_rank());
      for (int i = static_cast<int>(blockIdx.x / 2); i < units / 2; i += static_cast<int>(gridDim.x / 2))
        consume_unit(p, m, pair_unit(i, rank, splits), splits, ws, n);
    } else {
      for (int u = static_cast<int>(blockIdx.x); u < units; u += static_cast<int>(gridDim.x))
        consume_unit(p, m, u, splits, ws, n);
    }
    if (c == 0) sm90::named_barrier(kTurn, 256);  // consumer 1's last arrival
  }
  if constexpr (kPaired) cluster::sync();
}

inline int sm_count() {
  static const int sms = [] {
    int device = 0, count = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
}

template <class Params>
using Entry = void (*)(Params, int, int, SplitOut);

// One launch of kKernel (a version's entry) on min(units, SMs) CTAs, then the split combine when
// splits > 1. who: the name errors give. The shared-memory attribute is set once per entry.
template <class Params, Entry<Params> kKernel>
void launch(const Params& p, int splits, SplitOut ws, cudaStream_t stream, const char* who) {
  const uint32_t smem = v5::smem_request();
  static const cudaError_t attr =
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  CUDA_CHECK(attr);
  const int64_t units = p.rows() * (p.n_heads / layout::kRows) * splits;
  if (units == 0) return;
  if (units > INT32_MAX) throw std::invalid_argument(std::string(who) + ": more than 2^31 - 1 work units");
  const int64_t grid = units < sm_count() ? units : sm_count();  // one CTA per SM (227 KiB each)
  kKernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p, splits, static_cast<int>(units), ws);
  CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    split_combine_kernel<Params><<<static_cast<unsigned>(p.rows() * p.n_heads), 128, 0, stream>>>(p, splits, ws);
    CUDA_CHECK_LAUNCH();
  }
}

// v8: one launch of kKernel in clusters of 2 CTAs (cudaLaunchKernelEx, as cuda/topk/cluster_launch.cuh),
// min(pair units, co-resident clusters) clusters, then the split combine. Decode with 2 head groups only.
template <class Params, Entry<Params> kKernel>
void launch_paired(const Params& p, int splits, SplitOut ws, cudaStream_t stream, const char* who) {
  const uint32_t smem = v5::smem_request();
  static const cudaError_t attr =
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  CUDA_CHECK(attr);
  if (p.n_heads != 2 * layout::kRows) throw std::invalid_argument(std::string(who) + ": pairs need 128 heads");
  const int64_t pairs = p.rows() * splits;
  if (pairs == 0) return;
  if (2 * pairs > INT32_MAX) throw std::invalid_argument(std::string(who) + ": more than 2^31 - 1 work units");
  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1] = {};
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 2;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  static const int resident = [&] {  // clusters of 2 that fit at once (one CTA per SM; GPCs of odd size lose one)
    config.gridDim = dim3(2 * static_cast<unsigned>(sm_count() / 2));
    int clusters = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config));
    return clusters > 0 ? clusters : 1;
  }();
  const int64_t clusters = pairs < resident ? pairs : resident;
  config.gridDim = dim3(2 * static_cast<unsigned>(clusters));
  CUDA_CHECK(cudaLaunchKernelEx(&config, kKernel, p, splits, static_cast<int>(2 * pairs), ws));
  CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    split_combine_kernel<Params><<<static_cast<unsigned>(p.rows() * p.n_heads), 128, 0, stream>>>(p, splits, ws);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace dsv4::cuda::attention::detail::v5_grid
