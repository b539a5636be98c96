// v1: the simplest correct sparse MQA kernel, written as the oracle's loop
// (reference/stages/sparse_mqa.cpp) so that it gives the oracle's values: one block of 64 threads
// per (query row, head); the slots are walked in blocks of 64 (one slot per thread) with a running
// max; every operation the oracle does in double is done in double here, in the same order, and
// rounded where the oracle rounds:
//   logit  s_j = f32(f32(scale) * f32(fixed_order_dot(q_h, kv_j)))     (reference/primitives/dot.h)
//   probs  p_j = f32(exp(f32(s_j - m_new))), P_j = bf16(p_j) or p_j
//   state  acc = f32(f32(acc * r) + sum_j P_j kv_j), l = f32(f32(l * r) + f32(sum_j p_j)),
//          r = f32(exp(f32(m - m_new))) (no rescale before the first valid slot)
//   out    bf16(f32(acc / f32(l + f32(exp(f32(sink - m))))))
// The sums over slots run in slot order in double, as the oracle's. The only possible difference is
// the last bit of exp in double (CUDA's and the host's may differ by an ulp), which reaches an fp32
// probability only when the double result lies within an ulp of an fp32 rounding boundary
// (about 2^-28 of the values). lse = f32(m + log(l)) and max_logits = m come from the same state.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/launchers.h"
#include "cuda/attention/model1_codec.cuh"
#include "cuda/common/cuda_check.h"
#include "cuda/common/numerics.cuh"

namespace dsv4::cuda::attention::detail {
namespace {

constexpr int kThreads = kSlotBlock;  // one thread per slot of a block

// The oracle's round_to(fp32, x) and round_to(bf16, x) of a double (reference/numerics/storage.h).
__device__ inline double round_f32(double x) { return static_cast<double>(static_cast<float>(x)); }
__device__ inline double round_bf16(double x) { return static_cast<double>(bf16_round(static_cast<float>(x))); }
constexpr double kNegInf = -INFINITY;

// Shared memory of one block: q as doubles, the block's logits and probabilities, validity flags,
// and the block's kv rows as bf16 codes (row stride d + 2 codes: consecutive rows start one bank
// apart, so the 64 threads reading "their" row at the same dim do not conflict).
struct SimpleSmem {
  static size_t bytes(int d) {
    return sizeof(double) * (d + 3 * kThreads) + sizeof(int) * kThreads + sizeof(uint16_t) * kThreads * (d + 2);
  }
};

// Writes the dequantized 512 values of a valid decode slot into `row` (bf16 codes).
__device__ bool load_row(const DecodeRowSlots& rs, int slot, uint16_t* row) {
  const uint8_t* data;
  const uint8_t* scales;
  if (!rs.resolve(slot, data, scales)) return false;
  const uint32_t* words = reinterpret_cast<const uint32_t*>(data);  // 16-byte aligned token data
  for (int w = 0; w < kModel1NopeDims / 4; ++w) {
    const uint32_t four = words[w];
    const uint32_t e = scales[(4 * w) / kModel1ScaleBlock];
    for (int k = 0; k < 4; ++k) row[4 * w + k] = exact_bf16_bits(model1_nope_value((four >> (8 * k)) & 0xFFu, e));
  }
  const uint16_t* rope = reinterpret_cast<const uint16_t*>(data + kModel1NopeDims);
  for (int k = 0; k < kModel1RopeDims; ++k) row[kModel1NopeDims + k] = rope[k];
  return true;
}

// Copies the bf16 row of a valid prefill slot.
__device__ bool load_row(const PrefillParams& p, const PrefillRowSlots& rs, int slot, uint16_t* row) {
  const int64_t r = rs.resolve(slot);
  if (r < 0) return false;
  const uint16_t* src = p.kv + r * p.d;
  for (int c = 0; c < p.d; ++c) row[c] = src[c];
  return true;
}

__device__ bool load_slot(const DecodeParams&, const DecodeRowSlots& rs, int slot, uint16_t* row) {
  return load_row(rs, slot, row);
}
__device__ bool load_slot(const PrefillParams& p, const PrefillRowSlots& rs, int slot, uint16_t* row) {
  return load_row(p, rs, slot, row);
}

// reference/primitives/dot.h fixed_order_dot: four interleaved partial sums, then (0+1)+(2+3).
__device__ double fixed_order_dot(const double* q, const uint16_t* kv, int d) {
  double part[4] = {0, 0, 0, 0};
  for (int k = 0; k < d; k += 4)
    for (int l = 0; l < 4; ++l) part[l] += q[k + l] * static_cast<double>(bf16_value(kv[k + l]));
  return (part[0] + part[1]) + (part[2] + part[3]);
}

template <class Params, bool kBf16Probs>
__global__ void __launch_bounds__(kThreads) sparse_mqa_v1_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int d = p.head_dim();
  double* qd = reinterpret_cast<double*>(smem_raw);  // [d]
  double* logit = qd + d;                            // [64]
  double* prob = logit + kThreads;                   // [64] P-rounded, for P.V
  double* pf = prob + kThreads;                      // [64] fp32, for the denominator
  int* valid = reinterpret_cast<int*>(pf + kThreads);
  uint16_t* kblk = reinterpret_cast<uint16_t*>(valid + kThreads);  // [64][d + 2]
  const int stride = d + 2;

  const int64_t row = blockIdx.x / p.n_heads;
  const int head = static_cast<int>(blockIdx.x % p.n_heads);
  const int tid = threadIdx.x;
  const int dims_per_thread = d / kThreads;  // d is a multiple of 64, at most 512

  const uint16_t* q = p.q_row(row, head);
  for (int c = tid; c < d; c += kThreads) qd[c] = bf16_value(q[c]);

  const auto rs = p.row_slots(row);
  const double scale = round_f32(p.scale);
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  double m = kNegInf, den = 0;
  const int n_blocks = (rs.total() + kThreads - 1) / kThreads;
  for (int blk = 0; blk < n_blocks; ++blk) {
    const bool v = load_slot(p, rs, blk * kThreads + tid, kblk + tid * stride);
    valid[tid] = v;
    __syncthreads();  // q (first block) and this thread's row written
    logit[tid] = v ? round_f32(scale * round_f32(fixed_order_dot(qd, kblk + tid * stride, d))) : kNegInf;
    if (!__syncthreads_or(v)) continue;  // a block without a valid slot changes nothing

    double block_max = kNegInf;
    for (int j = 0; j < kThreads; ++j)
      if (valid[j]) block_max = fmax(block_max, logit[j]);
    const double m_new = fmax(m, block_max);
    const double pj = v ? round_f32(exp(round_f32(logit[tid] - m_new))) : 0.0;
    pf[tid] = pj;
    prob[tid] = kBf16Probs ? round_bf16(pj) : pj;
    __syncthreads();

    double block_sum = 0;
    for (int j = 0; j < kThreads; ++j)
      if (valid[j]) block_sum += pf[j];
    if (m != kNegInf) {  // before the first valid slot acc and l are 0: nothing to rescale
      const double r = round_f32(exp(round_f32(m - m_new)));
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if (i < dims_per_thread) acc[i] = round_f32(acc[i] * r);
      den = round_f32(den * r);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (i >= dims_per_thread) break;
      const int c = tid + i * kThreads;
      double block_acc = 0;
      for (int j = 0; j < kThreads; ++j)
        if (valid[j]) block_acc += prob[j] * static_cast<double>(bf16_value(kblk[j * stride + c]));
      acc[i] = round_f32(acc[i] + block_acc);
    }
    den = round_f32(den + round_f32(block_sum));
    m = m_new;
    __syncthreads();  // the next block overwrites the rows, flags and probabilities
  }

  uint16_t* out = p.out_row(row, head);
  float* lse = p.lse_at(row, head);
  float* max_logit = p.max_logit_at(row, head);
  if (m == kNegInf) {  // no valid slot: out 0, lse +inf, max logit -inf
    for (int c = tid; c < d; c += kThreads) out[c] = 0;
    if (tid == 0 && lse) *lse = INFINITY;
    if (tid == 0 && max_logit) *max_logit = -INFINITY;
    return;
  }
  const double sink = p.sink ? static_cast<double>(p.sink[head]) : kNegInf;
  const double denominator = round_f32(den + round_f32(exp(round_f32(sink - m))));
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (i < dims_per_thread) out[tid + i * kThreads] = bf16_bits(static_cast<float>(acc[i] / denominator));
  if (tid == 0 && lse) *lse = static_cast<float>(m + log(den));
  if (tid == 0 && max_logit) *max_logit = static_cast<float>(m);
}

template <class Params, bool kBf16Probs>
void launch(const Params& p, cudaStream_t stream) {
  const size_t smem = SimpleSmem::bytes(p.head_dim());
  auto* kernel = sparse_mqa_v1_kernel<Params, kBf16Probs>;
  // The largest request (d = 512) once; smaller d need less.
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(SimpleSmem::bytes(Params::kHeadDimMax)));
  CUDA_CHECK(attr);
  const int64_t blocks = p.rows() * p.n_heads;
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_v1(const DecodeParams& p, Probs probs, cudaStream_t stream) {
  if (probs == Probs::bf16)
    launch<DecodeParams, true>(p, stream);
  else
    launch<DecodeParams, false>(p, stream);
}

void launch_v1(const PrefillParams& p, Probs probs, cudaStream_t stream) {
  if (probs == Probs::bf16)
    launch<PrefillParams, true>(p, stream);
  else
    launch<PrefillParams, false>(p, stream);
}

}  // namespace dsv4::cuda::attention::detail
