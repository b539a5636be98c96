// v2: sparse MQA on the tensor cores (bf16 mma.sync, fp32 accumulation). One block of 256 threads
// (8 warps) per (query row, group of 64 heads[, split of the slots]); the slots in blocks of 64 with
// a running max, as kernel.py walks them (docs/cuda-attention.md has the design and the numbers).
//
// Per block of 64 slots:
//   load     cp.async of the next block's bytes while this one is computed (decode: the MODEL1
//            token bytes into a raw staging buffer; prefill: the bf16 rows straight into the
//            second k buffer); invalid slots are zero-filled, never read;
//   dequant  (decode) FP8 e4m3 x UE8M0 -> bf16 on the CUDA cores, exact (model1_codec.cuh);
//   QK       warp w: heads 16(w%4).., slots 32(w/4)..; s = f32(acc * scale), written to S;
//   softmax  warp w: heads 8w..8w+7; m' = max(m, valid s), p = expf(s - m'), r = expf(m - m'),
//            l' = l r + sum p (fp32); P = bf16(p), or p split into three bf16 planes
//            (hi + mid + lo = p exactly) for the fp32-probability variant;
//   PV       warp w: dims 64w..64w+63 of all 64 heads; O = O r + P V (V = the same k rows).
// Epilogue: out = bf16(O / (l + expf(sink - m))), lse = m + log(l); a row without a valid slot
// gives out 0, lse +inf. With splits, each split writes (O, m, l) and split_combine_kernel merges them
// in split order: M = max m_s, L = sum l_s e^(m_s - M), out = sum e^(m_s - M) O_s / (L + e^(sink - M)).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/launchers.h"
#include "cuda/attention/mma_layout.cuh"
#include "cuda/attention/mma_sm80.cuh"
#include "cuda/attention/model1_codec.cuh"
#include "cuda/attention/split_combine.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/numerics.cuh"

namespace dsv4::cuda::attention::detail {
namespace {

using namespace layout;
using namespace mma;

constexpr int kThreads = 256;
constexpr int kHeadsPerBlock = 64;

static_assert(kRows == kSlotBlock && kRows == kHeadsPerBlock, "one block: 64 heads x 64 slots");
static_assert(prefill_plan().total <= 232448 && decode_plan().total <= 232448,
              "shared memory plan exceeds the 227 KiB a block may have on sm_90");

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, s));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, s);
  return v;
}

// q of 64 heads (rows of 512 bf16, consecutive in memory) -> the q matrix. 4096 chunks of 16 bytes.
__device__ __forceinline__ void issue_q(uint32_t q_smem, const uint16_t* q_heads) {
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const int c = threadIdx.x + kThreads * k;
    const int head = c >> 6, chunk = c & 63;
    cp_async_16(q_smem + matrix_offset(head, chunk), q_heads + head * kHeadDim + chunk * 8, true);
  }
}

// Decode: the MODEL1 bytes of the 64 slots of block `blk` -> raw staging (576 data bytes per
// token, then 8 scale bytes per token). 8 threads per token, two tokens per thread.
__device__ __forceinline__ void issue_block(const DecodeParams& p, const DecodeRowSlots& rs, int blk, uint32_t raw) {
  const int sub = threadIdx.x & 7;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int token = (threadIdx.x >> 3) + 32 * half;
    const uint8_t* data;
    const uint8_t* scales;
    const bool valid = rs.resolve(blk * kRows + token, data, scales);
    if (!valid) data = scales = reinterpret_cast<const uint8_t*>(p.q);  // not read (zero fill)
#pragma unroll
    for (int part = sub; part < 37; part += 8) {
      if (part < 36)
        cp_async_16(raw + token * 576 + part * 16, data + part * 16, valid);
      else
        cp_async_8(raw + kRawDataBytes + token * 8, scales, valid);
    }
  }
}

// Prefill: the bf16 rows of block `blk` -> a k matrix. 4 threads per token.
__device__ __forceinline__ void issue_block(const PrefillParams& p, const PrefillRowSlots& rs, int blk, uint32_t k) {
  const int token = threadIdx.x >> 2, sub = threadIdx.x & 3;
  const int64_t r = rs.resolve(blk * kRows + token);
  const uint16_t* src = r >= 0 ? p.kv + r * kHeadDim : p.q;  // p.q: not read (zero fill)
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int chunk = sub + 4 * j;
    cp_async_16(k + matrix_offset(token, chunk), src + chunk * 8, r >= 0);
  }
}

__device__ __forceinline__ bool slot_valid(const DecodeRowSlots& rs, int slot) {
  const uint8_t* data;
  const uint8_t* scales;
  return rs.resolve(slot, data, scales);
}
__device__ __forceinline__ bool slot_valid(const PrefillRowSlots& rs, int slot) { return rs.resolve(slot) >= 0; }

// Validity bits of block `blk` -> mask[0] (slots 0..31), mask[1] (32..63). Warps 0 and 1.
template <class RowSlots>
__device__ __forceinline__ void write_mask(const RowSlots& rs, int blk, uint32_t* mask) {
  if (threadIdx.x < kRows) {
    const unsigned bits = __ballot_sync(0xFFFFFFFFu, slot_valid(rs, blk * kRows + threadIdx.x));
    if ((threadIdx.x & 31) == 0) mask[threadIdx.x >> 5] = bits;
  }
}

// Decode: raw staging -> bf16 k matrix. 4096 output chunks of 8 dims: 56 FP8 chunks (8 codes and
// their block's scale byte) and 8 rope chunks (copied) per token.
__device__ __forceinline__ void dequant_block(const unsigned char* raw, unsigned char* k) {
#pragma unroll 4
  for (int i = 0; i < 16; ++i) {
    const int c = threadIdx.x + kThreads * i;
    const int token = c >> 6, chunk = c & 63;
    uint4 v;
    if (chunk < kModel1NopeDims / 8) {
      const uint2 codes = *reinterpret_cast<const uint2*>(raw + token * 576 + chunk * 8);
      const uint32_t e = raw[kRawDataBytes + token * 8 + (chunk >> 3)];
      uint32_t w[4];
      dequant8(codes.x, codes.y, e, w);
      v = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      v = *reinterpret_cast<const uint4*>(raw + token * 576 + kModel1NopeDims + (chunk - 56) * 16);
    }
    *reinterpret_cast<uint4*>(k + matrix_offset(token, chunk)) = v;
  }
}

// S[64 heads][64 slots] = scale * q k^T for the warp's 16 heads x 32 slots.
__device__ __forceinline__ void qk_block(uint32_t q, uint32_t k, unsigned char* sp_ptr, float scale) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int head0 = (warp & 3) * 16, slot0 = (warp >> 2) * 32;
  const int a_row = head0 + (lane & 7) + ((lane >> 3) & 1) * 8, a_hi = lane >> 4;
  const int b_row = slot0 + (lane & 7) + ((lane >> 4) & 1) * 8, b_hi = (lane >> 3) & 1;
  float acc[4][4];
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    uint32_t a[4], b0[4], b1[4];
    ldmatrix_x4(a, q + matrix_offset(a_row, 2 * ks + a_hi));
    ldmatrix_x4(b0, k + matrix_offset(b_row, 2 * ks + b_hi));
    ldmatrix_x4(b1, k + matrix_offset(b_row + 16, 2 * ks + b_hi));
    mma_bf16(acc[0], a, b0[0], b0[1]);
    mma_bf16(acc[1], a, b0[2], b0[3]);
    mma_bf16(acc[2], a, b1[0], b1[1]);
    mma_bf16(acc[3], a, b1[2], b1[3]);
  }
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    const int slot = slot0 + 8 * n + 2 * c;
    *reinterpret_cast<float2*>(sp_ptr + s_offset(head0 + g, slot)) = make_float2(acc[n][0] * scale, acc[n][1] * scale);
    *reinterpret_cast<float2*>(sp_ptr + s_offset(head0 + g + 8, slot)) =
        make_float2(acc[n][2] * scale, acc[n][3] * scale);
  }
}

// The running softmax of the warp's 8 heads over this block; P written over their S lines. Every
// lane reads the heads' state (m, l) before lanes 0..7 write the new one (lane r: head 8w + r),
// separated by __syncwarp: a shuffle orders no shared-memory access.
template <int kPlanes>
__device__ __forceinline__ void softmax_block(unsigned char* sp_ptr, uint32_t mask_lo, uint32_t mask_hi, float* st_m,
                                              float* st_l, float* st_r) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool v0 = (mask_lo >> lane) & 1u, v1 = (mask_hi >> lane) & 1u;
  float s0[8], s1[8], m_old[8], l_old[8];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int h = 8 * warp + r;
    s0[r] = *reinterpret_cast<const float*>(sp_ptr + s_offset(h, lane));
    s1[r] = *reinterpret_cast<const float*>(sp_ptr + s_offset(h, lane + 32));
    m_old[r] = st_m[h];
    l_old[r] = st_l[h];
  }
  __syncwarp();  // every lane has read the warp's S lines and state before P and the state are written
  float my_m = 0.0f, my_l = 0.0f, my_r = 0.0f;  // lane r < 8: the new state of head 8w + r
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int h = 8 * warp + r;
    const float m_new = fmaxf(m_old[r], warp_max(fmaxf(v0 ? s0[r] : -INFINITY, v1 ? s1[r] : -INFINITY)));
    const float p0 = v0 ? expf(s0[r] - m_new) : 0.0f;
    const float p1 = v1 ? expf(s1[r] - m_new) : 0.0f;
    const float sum = warp_sum(p0 + p1);
    const float rescale = expf(m_old[r] - m_new);  // 0 before the first valid slot (m_old = -inf)
    const float ps[2] = {p0, p1};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float rest = ps[half];
#pragma unroll
      for (int plane = 0; plane < kPlanes; ++plane) {
        const uint16_t code = bf16_bits(rest);
        *reinterpret_cast<uint16_t*>(sp_ptr + p_element_offset(h, plane, lane + 32 * half)) = code;
        rest = rest - bf16_value(code);  // exact: the part of p the planes so far miss
      }
    }
    if (lane == r) {
      my_m = m_new;
      my_l = l_old[r] * rescale + sum;
      my_r = rescale;
    }
  }
  if (lane < 8) {
    st_m[8 * warp + lane] = my_m;
    st_l[8 * warp + lane] = my_l;
    st_r[8 * warp + lane] = my_r;
  }
}

// O (warp w: 64 heads x dims 64w..64w+63) = O * rescale + P V.
template <int kPlanes>
__device__ __forceinline__ void pv_block(float (&o)[4][8][4], uint32_t k, uint32_t sp, const float* st_r) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
    const float r_lo = st_r[16 * mt + g], r_hi = st_r[16 * mt + g + 8];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      o[mt][nt][0] *= r_lo;
      o[mt][nt][1] *= r_lo;
      o[mt][nt][2] *= r_hi;
      o[mt][nt][3] *= r_hi;
    }
  }
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_hi = lane >> 4;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_hi = lane >> 4;
#pragma unroll
  for (int ks = 0; ks < kRows / 16; ++ks) {
    uint32_t b[4][4];
#pragma unroll
    for (int np = 0; np < 4; ++np)
      ldmatrix_x4_trans(b[np], k + matrix_offset(16 * ks + v_row, 8 * warp + 2 * np + v_hi));
#pragma unroll
    for (int plane = 0; plane < kPlanes; ++plane) {
      uint32_t a[4][4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) ldmatrix_x4(a[mt], sp + p_offset(16 * mt + a_row, plane, 2 * ks + a_hi));
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int np = 0; np < 4; ++np) {
          mma_bf16(o[mt][2 * np], a[mt], b[np][0], b[np][1]);
          mma_bf16(o[mt][2 * np + 1], a[mt], b[np][2], b[np][3]);
        }
    }
  }
}

template <class Params, bool kDecode, int kPlanes>
__global__ void __launch_bounds__(kThreads, 1) sparse_mqa_v2_kernel(Params p, int splits, SplitOut ws) {
  extern __shared__ __align__(1024) unsigned char smem[];
  constexpr Plan plan = kDecode ? decode_plan() : prefill_plan();
  const uint32_t sbase = smem_addr(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  const int groups = p.n_heads / kHeadsPerBlock;
  const int split = static_cast<int>(blockIdx.x % splits);
  const int64_t rest = blockIdx.x / splits;
  const int group = static_cast<int>(rest % groups);
  const int64_t row = rest / groups;
  const int head_base = group * kHeadsPerBlock;

  const auto rs = p.row_slots(row);
  const int n_blocks = (rs.total() + kRows - 1) / kRows;
  const int per_split = (n_blocks + splits - 1) / splits;
  const int blk_begin = min(n_blocks, split * per_split);
  const int blk_end = min(n_blocks, blk_begin + per_split);

  float* st_m = reinterpret_cast<float*>(smem + plan.state);
  float* st_l = st_m + kRows;
  float* st_r = st_l + kRows;
  uint32_t* mask = reinterpret_cast<uint32_t*>(smem + plan.mask);  // [2 buffers][2 words]
  if (tid < kRows) {
    st_m[tid] = -INFINITY;
    st_l[tid] = 0.0f;
    st_r[tid] = 0.0f;
  }

  issue_q(sbase + plan.q, p.q_row(row, head_base));
  if (blk_begin < blk_end) {
    issue_block(p, rs, blk_begin, sbase + (kDecode ? plan.raw0 : plan.k0));
    write_mask(rs, blk_begin, mask);
  }
  cp_async_commit();

  float o[4][8][4];
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][nt][e] = 0.0f;

  for (int blk = blk_begin; blk < blk_end; ++blk) {
    const int buf = (blk - blk_begin) & 1;
    cp_async_wait<0>();  // this block's bytes (and q) have landed
    __syncthreads();     // ... for every thread; and every thread is done with the previous block
    if (blk + 1 < blk_end) {
      const uint32_t next = kDecode ? (buf ? plan.raw0 : plan.raw1) : (buf ? plan.k0 : plan.k1);
      issue_block(p, rs, blk + 1, sbase + next);
      write_mask(rs, blk + 1, mask + 2 * (buf ^ 1));
    }
    cp_async_commit();
    const uint32_t mask_lo = mask[2 * buf], mask_hi = mask[2 * buf + 1];
    if ((mask_lo | mask_hi) == 0) continue;  // a block without a valid slot changes nothing

    uint32_t k, sp;
    if constexpr (kDecode) {
      const uint32_t raw = buf ? plan.raw1 : plan.raw0;
      dequant_block(smem + raw, smem + plan.k0);
      __syncthreads();
      k = plan.k0;
      sp = raw;  // the raw bytes are consumed: S / P take their place
    } else {
      k = buf ? plan.k1 : plan.k0;
      sp = plan.sp;
    }
    qk_block(sbase + plan.q, sbase + k, smem + sp, p.scale);
    __syncthreads();
    softmax_block<kPlanes>(smem + sp, mask_lo, mask_hi, st_m, st_l, st_r);
    __syncthreads();
    pv_block<kPlanes>(o, sbase + k, sbase + sp, st_r);
  }
  cp_async_wait<0>();
  __syncthreads();  // the state of the last block (or the initial one) is visible to all

  const int g = lane >> 2, c = lane & 3;
  if (splits == 1) {
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int h = 16 * mt + g + 8 * half;
        const float l = st_l[h], m = st_m[h];
        const float sink = p.sink ? p.sink[head_base + h] : -INFINITY;
        const float den = l + expf(sink - m);
        uint16_t* out = p.out_row(row, head_base + h);
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int d = 64 * warp + 8 * nt + 2 * c;
          const float x0 = l > 0.0f ? o[mt][nt][2 * half] / den : 0.0f;
          const float x1 = l > 0.0f ? o[mt][nt][2 * half + 1] / den : 0.0f;
          *reinterpret_cast<uint32_t*>(out + d) =
              static_cast<uint32_t>(bf16_bits(x0)) | (static_cast<uint32_t>(bf16_bits(x1)) << 16);
        }
      }
    if (tid < kRows) {
      const float l = st_l[tid], m = st_m[tid];
      if (float* lse = p.lse_at(row, head_base + tid)) *lse = l > 0.0f ? m + logf(l) : INFINITY;
      if (float* ml = p.max_logit_at(row, head_base + tid)) *ml = l > 0.0f ? m : -INFINITY;
    }
    return;
  }
  // Split: the partial (O, m, l) of this split.
  const int64_t part = (static_cast<int64_t>(split) * p.rows() + row) * p.n_heads + head_base;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int h = 16 * mt + g + 8 * half;
      float* o_part = ws.o + (part + h) * kHeadDim;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        *reinterpret_cast<float2*>(o_part + 64 * warp + 8 * nt + 2 * c) =
            make_float2(o[mt][nt][2 * half], o[mt][nt][2 * half + 1]);
    }
  if (tid < kRows) {
    ws.m[part + tid] = st_m[tid];
    ws.l[part + tid] = st_l[tid];
  }
}

template <class Params, bool kDecode, int kPlanes>
void launch_kernel(const Params& p, int splits, SplitOut ws, cudaStream_t stream) {
  constexpr Plan plan = kDecode ? decode_plan() : prefill_plan();
  auto* kernel = sparse_mqa_v2_kernel<Params, kDecode, kPlanes>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(plan.total));
  CUDA_CHECK(attr);
  const int64_t blocks = p.rows() * (p.n_heads / kHeadsPerBlock) * splits;
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), kThreads, plan.total, stream>>>(p, splits, ws);
  CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    split_combine_kernel<Params><<<static_cast<unsigned>(p.rows() * p.n_heads), 128, 0, stream>>>(p, splits, ws);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_v2(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream) {
  const SplitOut ws = split_views(workspace, p.rows(), p.n_heads, splits);
  if (probs == Probs::bf16)
    launch_kernel<DecodeParams, true, 1>(p, splits, ws, stream);
  else
    launch_kernel<DecodeParams, true, 3>(p, splits, ws, stream);
}

void launch_v2(const PrefillParams& p, Probs probs, cudaStream_t stream) {
  if (probs == Probs::bf16)
    launch_kernel<PrefillParams, false, 1>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
  else
    launch_kernel<PrefillParams, false, 3>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
}

}  // namespace dsv4::cuda::attention::detail
