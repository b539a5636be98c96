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

// The CTA's body. consume_unit(p, m, u, splits, ws, n): one work unit u of the calling consumer
// warpgroup, n the CTA's block count so far (both sides count the same blocks).
template <class Params, class ConsumeUnit>
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

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(m.b.stage(s).full, 128);   // every producer thread
      sm90::mbarrier_init(m.b.stage(s).empty, 256);  // every consumer thread
    }
    sm90::mbarrier_init(m.q_free, 256);  // every consumer thread, once per unit with blocks
    sm90::fence_mbarrier_init();
  }
  __syncthreads();

  uint32_t n = 0;  // blocks of this CTA so far (both sides count the same blocks)
  if (threadIdx.x < 128) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    uint32_t units_with_blocks = 0;
    for (int u = static_cast<int>(blockIdx.x); u < units; u += static_cast<int>(gridDim.x)) {
      const UnitRange r = unit_range(p, u, splits);
      v5::produce_unit(p, m, r.row, p.q_row(r.row, r.head_base), r.begin, r.end, n, units_with_blocks);
    }
  } else {
    sm90::setmaxnreg_inc<kConsumerRegs>();
    const int c = static_cast<int>(threadIdx.x >> 7) - 1;
    if (c == 1) sm90::named_barrier_arrive(kTurn, 256);
    for (int u = static_cast<int>(blockIdx.x); u < units; u += static_cast<int>(gridDim.x))
      consume_unit(p, m, u, splits, ws, n);
    if (c == 0) sm90::named_barrier(kTurn, 256);  // consumer 1's last arrival
  }
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

}  // namespace dsv4::cuda::attention::detail::v5_grid
