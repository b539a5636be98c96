// v2 of the top-k (topk_api.h): a cluster of C CTAs per row (C = 1 up to 32768 candidates, else up
// to 8), CTA r of the cluster owning the contiguous slice r of the row. A slice of at most 32768
// keys is read once into shared memory as order keys; a longer one is re-read in every pass. The
// radix select of v1 runs on every CTA at once: each pass each CTA counts its slice, every CTA adds
// the cluster's histograms in rank order through distributed shared memory and so takes the same
// digit. The picks go to CTA 0's list: the keys above the k-th key, and of the keys equal to it the
// lowest-indexed ones (lower ranks hold lower indices; within a CTA an ordered block scan). CTA 0
// sorts them and writes the row.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/topk/topk_api.h"
#include "cuda/topk/topk_block.cuh"
#include "cuda/topk/topk_keys.cuh"
#include "cuda/topk/topk_launch.h"

namespace cg = cooperative_groups;

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kResident = 32768;  // keys of a slice held in shared memory (128 KiB)
constexpr int kMaxCluster = 8;    // the portable cluster size

struct Smem {
  uint32_t keys[kResident];
  unsigned hist[256];   // this CTA's counts
  unsigned total[256];  // the cluster's counts
  int scratch[33];
  int digit, above, n_picks, ties;
  uint64_t picks[kMaxTopk];  // CTA 0's list
};

// Adds 1 to hist[bin] for every active lane, one shared atomic per distinct bin of the warp (many
// equal scores, e.g. ReLU's zero plateaus, would otherwise serialise on one address). Every lane
// of the warp calls it.
__device__ inline void hist_add(unsigned* hist, unsigned bin, bool active) {
  const unsigned lanes = __ballot_sync(0xffffffffu, active);
  if (!active) return;
  const unsigned peers = __match_any_sync(lanes, bin);
  if (static_cast<int>(threadIdx.x % 32) == __ffs(peers) - 1)
    atomicAdd(&hist[bin], static_cast<unsigned>(__popc(peers)));
}

__global__ void __launch_bounds__(kThreads, 1) topk_v2_kernel(const TopkArgs a) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int t = threadIdx.x;
  const int64_t row = blockIdx.x / c;
  const float* x = a.scores + row * a.stride;
  const int64_t len = a.lengths[row];
  const int64_t part = ((len + c - 1) / c + 3) / 4 * 4;
  const int64_t lo = min(len, rank * part), hi = min(len, lo + part);
  const bool resident = part <= kResident;
  if (resident)
    for (int64_t i = lo + t; i < hi; i += kThreads) sm.keys[i - lo] = order_key(x[i]);
  if (rank == 0 && t == 0) sm.n_picks = 0;
  auto key_at = [&](int64_t i) { return resident ? sm.keys[i - lo] : order_key(x[i]); };

  uint32_t prefix = 0, mask = 0;
  int need = a.k;
  bool take_all = false;
  for (int d = 3; d >= 0; --d) {
    for (int i = t; i < 256; i += kThreads) sm.hist[i] = 0;
    __syncthreads();
    for (int64_t base = lo; base < hi; base += kThreads) {
      const int64_t i = base + t;
      const uint32_t key = i < hi ? key_at(i) : 0;
      hist_add(sm.hist, (key >> (8 * d)) & 0xffu, key != 0 && (key & mask) == prefix);
    }
    cluster.sync();  // every CTA's counts complete (and the keys and n_picks above visible)
    if (t < 256) {
      unsigned sum = 0;
      for (int r = 0; r < c; ++r) sum += cluster.map_shared_rank(sm.hist, r)[t];
      sm.total[t] = sum;
    }
    cluster.sync();  // every CTA done reading the others' counts before they are cleared
    if (d == 3) {
      int visible = 0;
      (void)topk_block::exclusive_scan(t < 256 ? static_cast<int>(sm.total[t]) : 0, sm.scratch, visible);
      if (visible <= a.k) {
        take_all = true;
        break;
      }
    }
    topk_block::select_digit(sm.total, need, sm.scratch, &sm.digit, &sm.above);
    need -= sm.above;
    prefix |= static_cast<uint32_t>(sm.digit) << (8 * d);
    mask |= 0xffu << (8 * d);
  }

  int* picks_count = cluster.map_shared_rank(&sm.n_picks, 0);
  uint64_t* picks = cluster.map_shared_rank(sm.picks, 0);
  for (int64_t i = lo + t; i < hi; i += kThreads) {
    const uint32_t key = key_at(i);
    if (take_all ? key != 0 : key > prefix) picks[atomicAdd(picks_count, 1)] = composite(key, static_cast<uint32_t>(i));
  }
  if (!take_all) {
    int mine = 0;  // this CTA's keys equal to the k-th key
    for (int64_t base = lo; base < hi; base += kThreads) {
      const int64_t i = base + t;
      int chunk = 0;
      (void)topk_block::exclusive_scan(i < hi && key_at(i) == prefix ? 1 : 0, sm.scratch, chunk);
      mine += chunk;
    }
    if (t == 0) sm.ties = mine;
    cluster.sync();
    int taken = 0;  // equal keys of the lower ranks (lower indices)
    for (int r = 0; r < rank; ++r) taken += *cluster.map_shared_rank(&sm.ties, r);
    for (int64_t base = lo; base < hi && taken < need; base += kThreads) {
      const int64_t i = base + t;
      const bool equal = i < hi && key_at(i) == prefix;
      int chunk = 0;
      const int r = taken + topk_block::exclusive_scan(equal ? 1 : 0, sm.scratch, chunk);
      if (equal && r < need) picks[atomicAdd(picks_count, 1)] = composite(prefix, static_cast<uint32_t>(i));
      taken += chunk;
    }
  }
  cluster.sync();  // every pick is in CTA 0's list; no CTA touches another's memory after this
  if (rank != 0) return;
  const int n = sm.n_picks;
  topk_block::sort_descending(sm.picks, n);
  int32_t* out = a.out + row * a.k;
  for (int col = t; col < a.k; col += kThreads)
    out[col] = col < n ? static_cast<int32_t>(composite_index(sm.picks[col])) + a.offset : -1;
}

}  // namespace

namespace detail {

void topk_v2(const TopkArgs& a, cudaStream_t stream) {
  const int c = a.max_length <= kResident
                    ? 1
                    : static_cast<int>(std::min<int64_t>(kMaxCluster, (a.max_length + kResident - 1) / kResident));
  const int smem = static_cast<int>(sizeof(Smem));
  CUDA_CHECK(cudaFuncSetAttribute(topk_v2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid_blocks(a.rows * c, 1, "topk v2"));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(c);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, topk_v2_kernel, a));
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace dsv4::cuda
