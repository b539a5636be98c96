// Online C128 (sglang's state-saving form): per channel a running max m, sum l and normalized mean,
// state [pool, 3, d] = rows (m, l, mean). One fp32 step per token (pooling.cuh online_step), the same
// in every kernel here, walked in token order, so prefill, decode and any chunking are bitwise equal
// on the GPU. The oracle's compress_online_c128 runs the same recurrence in double; the tests bound
// the difference.
//
// Prefill = compress pass + write pass. The compress pass walks each completed block (one
// entry-slab of threads, 4 channels a thread, rows prefetched 4 at a time; at most 64 registers so
// that 8 blocks share an SM: the walk is a chain of dependent rounds, so throughput comes from the
// number of blocks in flight), starting from the state
// when the block began before this call, and post-processes the entry. The write pass replays the
// block that holds the call's last token and stores its (m, l, mean): the state is read in the
// first launch and written in the second only.
#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/compressor/compressor_api.h"
#include "cuda/compressor/kernel_args.h"
#include "cuda/compressor/param_checks.h"
#include "cuda/compressor/pooling.cuh"
#include "cuda/compressor/postprocess_fused.cuh"
#include "cuda/compressor/rows.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 4;

struct Online4 {
  float m[4], l[4], mean[4];
};

__device__ inline Online4 load_state(const float* st, int d, int c) {
  const float4 m = *reinterpret_cast<const float4*>(st + c);
  const float4 l = *reinterpret_cast<const float4*>(st + d + c);
  const float4 mean = *reinterpret_cast<const float4*>(st + 2 * d + c);
  return {{m.x, m.y, m.z, m.w}, {l.x, l.y, l.z, l.w}, {mean.x, mean.y, mean.z, mean.w}};
}

__device__ inline void store_state(float* st, int d, int c, const Online4& s) {
  store4(st + c, make_float4(s.m[0], s.m[1], s.m[2], s.m[3]));
  store4(st + d + c, make_float4(s.l[0], s.l[1], s.l[2], s.l[3]));
  store4(st + 2 * d + c, make_float4(s.mean[0], s.mean[1], s.mean[2], s.mean[3]));
}

__device__ inline void step4(Online4& s, float4 score, float4 kv, bool first) {
#pragma unroll
  for (int k = 0; k < 4; ++k) online_step(s.m[k], s.l[k], s.mean[k], comp(score, k), comp(kv, k), first);
}

// Walks tokens [t0, t1) of one sequence (all in one block of 128, all inputs of this call) from
// state s; ape added per token. kChunk rows are loaded before they are used.
template <int D>
__device__ inline void walk(Online4& s, const ChunkDesc& ch, int64_t t0, int64_t t1, const float* __restrict__ kv,
                            const float* __restrict__ score, const float* __restrict__ ape, int c) {
  for (int64_t base = t0; base < t1; base += kChunk) {
    float4 wkv[kChunk], ws[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int64_t t = base + i;
      if (t < t1) {
        const int64_t row = ch.first_row + (t - ch.start_pos);
        wkv[i] = load4_stream(kv + row * D + c);
        ws[i] = add4(load4_stream(score + row * D + c), load4(ape + (t % 128) * D + c));
      }
    }
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      if (base + i < t1) step4(s, ws[i], wkv[i], (base + i) % 128 == 0);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads, 8) c128_online_prefill_pass(const CompressorArgs a) {
  __shared__ double smem[kThreads / 32];
  const int64_t item = slab_row<D, kThreads>();
  const int c = slab_channel<D>();
  float p[4] = {0, 0, 0, 0};
  int64_t j = 0;
  if (item < a.n_items) {
    const EntryDesc e = a.items[item];
    const ChunkDesc ch = e.chunk;
    j = e.entry;
    const int64_t block_start = 128 * j;
    Online4 s{};
    if (block_start < ch.start_pos)
      s = load_state(sequence_state<const float>(a.state_kv, ch.state_index, 3LL * D), D, c);
    walk<D>(s, ch, block_start > ch.start_pos ? block_start : ch.start_pos, block_start + 128, a.kv, a.score, a.ape, c);
#pragma unroll
    for (int k = 0; k < 4; ++k) p[k] = s.mean[k];
    if (a.pooled != nullptr) store4(a.pooled + item * D + c, make_float4(p[0], p[1], p[2], p[3]));
  }
  postprocess_fused<D, Kind::main>(p, j, a.norm, a.eps, a.rope, item < a.n_items ? a.entries + item * D : nullptr,
                                   smem);
}

// One thread per (chunk, 4 channels): replays the block holding the call's last token.
template <int D>
__global__ void c128_online_write_pass(const CompressorArgs a) {
  const int chunk = blockIdx.y;
  const int c = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (chunk >= a.n_chunks || c >= D) return;
  const ChunkDesc ch = a.chunks[chunk];
  if (ch.length == 0) return;
  const int64_t end = ch.start_pos + ch.length;
  const int64_t block_start = (end - 1) / 128 * 128;
  float* st = sequence_state(a.state_kv, ch.state_index, 3LL * D);
  Online4 s{};
  if (block_start < ch.start_pos) s = load_state(st, D, c);
  walk<D>(s, ch, block_start > ch.start_pos ? block_start : ch.start_pos, end, a.kv, a.score, a.ape, c);
  store_state(st, D, c, s);
}

// One decode token per sequence: one step, the state written back, and on the block's last token
// the running mean is the pooled entry.
template <int D>
__global__ void __launch_bounds__(kThreads) c128_online_decode_step(const CompressorArgs a) {
  __shared__ double smem[kThreads / 32];
  const int64_t b = slab_row<D, kThreads>();
  const int c = slab_channel<D>();
  float p[4] = {0, 0, 0, 0};
  int64_t pos = 0;
  bool emits = false;
  if (b < a.batch) {
    pos = a.positions[b];
    const int slot = static_cast<int>(pos % 128);
    float* st = sequence_state(a.state_kv, a.state_index[b], 3LL * D);
    Online4 s = load_state(st, D, c);
    const float4 w = add4(load4(a.score + b * D + c), load4(a.ape + slot * D + c));
    step4(s, w, load4(a.kv + b * D + c), slot == 0);
    store_state(st, D, c, s);
    emits = slot == 127;
#pragma unroll
    for (int k = 0; k < 4; ++k) p[k] = s.mean[k];
    if (emits && a.pooled != nullptr) store4(a.pooled + b * D + c, make_float4(p[0], p[1], p[2], p[3]));
  }
  postprocess_fused<D, Kind::main>(p, pos / 128, a.norm, a.eps, a.rope, emits ? a.entries + b * D : nullptr, smem);
}

template <int D>
void launch_online_prefill(const CompressorArgs& a, cudaStream_t stream) {
  if (a.n_items > 0) {
    const unsigned blocks = detail::grid_blocks(a.n_items, kThreads / (D / 4), "c128_online_prefill");
    c128_online_prefill_pass<D><<<blocks, kThreads, 0, stream>>>(a);
    CUDA_CHECK_LAUNCH();
  }
  if (a.n_chunks > 0) {
    const dim3 grid((D / 4 + kThreads - 1) / kThreads, static_cast<unsigned>(a.n_chunks));
    c128_online_write_pass<D><<<grid, kThreads, 0, stream>>>(a);
    CUDA_CHECK_LAUNCH();
  }
}

template <int D>
void launch_online_decode(const CompressorArgs& a, cudaStream_t stream) {
  const unsigned blocks = detail::grid_blocks(a.batch, kThreads / (D / 4), "c128_online_decode");
  c128_online_decode_step<D><<<blocks, kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

void check_online(const CompressorParams& p, int plan_ratio, int64_t max_entry, const char* who) {
  detail::check_params(p, 128, plan_ratio, max_entry, who);
  detail::require(p.kind == Kind::main, std::string(who) + ": online C128 has only the main kind (FP8 nope)");
}

}  // namespace

void c128_online_prefill(const CompressorParams& p, const BatchPlan& plan, const float* kv, const float* score,
                         float* state, uint16_t* entries, float* pooled, cudaStream_t stream) {
  check_online(p, plan.ratio(), plan.max_entry(), "c128_online_prefill");
  const CompressorArgs a = prefill_args(p, plan, kv, score, state, nullptr, entries, pooled);
  if (p.head_dim == 512)
    launch_online_prefill<512>(a, stream);
  else
    launch_online_prefill<128>(a, stream);
}

void c128_online_decode(const CompressorParams& p, const DecodePlan& plan, const float* kv, const float* score,
                        float* state, uint16_t* entries, float* pooled, cudaStream_t stream) {
  check_online(p, plan.ratio(), plan.max_entry(), "c128_online_decode");
  if (plan.batch() == 0) return;
  const CompressorArgs a = decode_args(p, plan, kv, score, state, nullptr, entries, pooled);
  if (p.head_dim == 512)
    launch_online_decode<512>(a, stream);
  else
    launch_online_decode<128>(a, stream);
}

}  // namespace dsv4::cuda
