// The probe kernels of v3_probes.h: v3's, v4's and v5's own pieces (v3_pieces.cuh, v4_pieces.cuh,
// v5_producer.cuh) on one block, nothing else.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

#include "cuda/attention/v3_pieces.cuh"
#include "cuda/attention/v3_probes.h"
#include "cuda/attention/v4_pieces.cuh"
#include "cuda/attention/v5_producer.cuh"
#include "cuda/common/cuda_check.h"

namespace dsv4::cuda::attention::probes {
namespace {

using namespace v3;
using layout::matrix_offset;

constexpr uint32_t kSmem = 3 * kTile + 3 * kPTile + 1024;  // q, k, (spare), p planes, alignment

struct Tiles {
  uint32_t base;
  unsigned char* ptr;
};

__device__ Tiles tiles(unsigned char* raw) {
  const uint32_t a = mma::smem_addr(raw);
  Tiles t;
  t.base = (a + 1023u) & ~1023u;
  t.ptr = raw + (t.base - a);
  return t;
}

// rows [64][512] bf16 (global, row-major) -> a swizzled tile; every thread of the block helps.
__device__ void fill_tile(unsigned char* tile, const uint16_t* rows) {
  for (int c = threadIdx.x; c < 64 * 64; c += blockDim.x) {
    const int r = c >> 6, chunk = c & 63;
    *reinterpret_cast<uint4*>(tile + matrix_offset(r, chunk)) =
        *reinterpret_cast<const uint4*>(rows + r * 512 + chunk * 8);
  }
}

// 256 threads: the two consumer warpgroups.
__global__ void __launch_bounds__(256, 1) qk_probe(const uint16_t* q, const uint16_t* k, float* s) {
  extern __shared__ __align__(1024) unsigned char raw[];
  const Tiles T = tiles(raw);
  fill_tile(T.ptr, q);
  fill_tile(T.ptr + kTile, k);
  sm90::fence_proxy_async();
  __syncthreads();
  const int c = threadIdx.x >> 7, t = threadIdx.x & 127;
  float acc[16];
  qk_block(T.base, T.base + kTile, c, acc);
#pragma unroll
  for (int e = 0; e < 16; ++e) s[acc_row(t, e) * 64 + kSlotsPerConsumer * c + acc_col(t, e)] = acc[e];
}

template <int kPlanes>
__global__ void __launch_bounds__(256, 1) pv_probe(const uint16_t* p, const uint16_t* v, float* o) {
  extern __shared__ __align__(1024) unsigned char raw[];
  const Tiles T = tiles(raw);
  fill_tile(T.ptr + kTile, v);
  for (int i = threadIdx.x; i < kPlanes * 64 * 64; i += blockDim.x) {
    const int plane = i / 4096, head = (i / 64) % 64, slot = i % 64;
    *reinterpret_cast<uint16_t*>(T.ptr + 3 * kTile + p_element_offset(plane, head, slot)) = p[i];
  }
  sm90::fence_proxy_async();
  __syncthreads();
  const int c = threadIdx.x >> 7, t = threadIdx.x & 127;
  float acc[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) acc[e] = 0.0f;
  pv_block<kPlanes>(T.base + 3 * kTile, T.base + kTile, c, acc);
#pragma unroll
  for (int e = 0; e < 128; ++e) o[acc_row(t, e) * 512 + kDimsPerConsumer * c + acc_col(t, e)] = acc[e];
}

__global__ void __launch_bounds__(256, 1) qk_all_probe(const uint16_t* q, const uint16_t* k, float* s) {
  extern __shared__ __align__(1024) unsigned char raw[];
  const Tiles T = tiles(raw);
  fill_tile(T.ptr, q);
  fill_tile(T.ptr + kTile, k);
  sm90::fence_proxy_async();
  __syncthreads();
  const int c = threadIdx.x >> 7, t = threadIdx.x & 127;
  float acc[32];
  v4::qk_block_all(T.base, T.base + kTile, acc, -1);
#pragma unroll
  for (int e = 0; e < 32; ++e) s[(c * 64 + acc_row(t, e)) * 64 + acc_col(t, e)] = acc[e];
}

template <int kPlanes>
__global__ void __launch_bounds__(256, 1) pv_regs_probe(const float* prob, const uint16_t* v, float* o) {
  extern __shared__ __align__(1024) unsigned char raw[];
  const Tiles T = tiles(raw);
  fill_tile(T.ptr + kTile, v);
  sm90::fence_proxy_async();
  __syncthreads();
  const int c = threadIdx.x >> 7, t = threadIdx.x & 127;
  float p[32];
#pragma unroll
  for (int e = 0; e < 32; ++e) p[e] = prob[acc_row(t, e) * 64 + acc_col(t, e)];
  float acc[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) acc[e] = 0.0f;
  v4::pv_block_regs<kPlanes>(p, T.base + kTile, c, acc);
#pragma unroll
  for (int e = 0; e < 128; ++e) o[acc_row(t, e) * 512 + kDimsPerConsumer * c + acc_col(t, e)] = acc[e];
}

// 128 threads: the producer warpgroup.
__global__ void __launch_bounds__(128, 1)
    decode_block_probe(DecodeParams p, int64_t row, int blk, uint16_t* rows, uint32_t* mask) {
  extern __shared__ __align__(1024) unsigned char raw[];
  const Tiles T = tiles(raw);
  const int t = threadIdx.x;
  const auto rs = p.row_slots(row);
  DecodeLoad L;
  load_decode(rs, blk * 64 + producer_token(t), producer_half(t), p.q, L);
  const uint32_t bits = token_bits(L.valid);
  store_decode(L, T.ptr, producer_token(t), producer_half(t));
  uint16_t* mask16 = reinterpret_cast<uint16_t*>(T.ptr + kTile);
  if ((t & 31) == 0) mask16[t >> 5] = static_cast<uint16_t>(bits);
  __syncthreads();
  for (int c = t; c < 64 * 64; c += 128) {
    const int r = c >> 6, chunk = c & 63;
    *reinterpret_cast<uint4*>(rows + r * 512 + chunk * 8) =
        *reinterpret_cast<const uint4*>(T.ptr + matrix_offset(r, chunk));
  }
  if (t < 2) mask[t] = reinterpret_cast<const uint32_t*>(mask16)[t];
}

// 128 threads: v5's producer warpgroup on one block (tile at the base, staging area after it).
__global__ void __launch_bounds__(128, 1)
    decode_block_probe_v5(DecodeParams p, int64_t row, int blk, uint16_t* rows, uint32_t* mask) {
  extern __shared__ __align__(1024) unsigned char raw[];
  const Tiles T = tiles(raw);
  v5::Smem m{};
  m.raw = T.base + kTile;
  m.raw_ptr = T.ptr + kTile;
  m.scales = m.raw + 64 * v5::kStageTokenBytes;
  m.scales_ptr = m.raw_ptr + 64 * v5::kStageTokenBytes;
  uint16_t* mask16 = reinterpret_cast<uint16_t*>(m.scales_ptr + 64 * 2 * 8);
  const int t = threadIdx.x, token = v5::producer_token(t), half = v5::producer_half(t);
  const auto rs = p.row_slots(row);
  const v5::TokenSource src = v5::token_source(rs, blk, token, p.q);
  for (int j = 0; j < v5::kFp8JobsPerThread; ++j) v5::issue_raw_chunk(src, m, token, half, j);
  v5::issue_raw_scales(src, m, token, half);
  mma::cp_async_commit();
  v5::RopeLoad rope;
  v5::load_rope(src, half, rope);
  mma::cp_async_wait<0>();
  v5::store_rope(rope, src.valid, T.ptr, token, half);
  v5::dequant_staged(m, T.ptr, token, half, false, src);
  const uint32_t bits = __ballot_sync(0xFFFFFFFFu, src.valid) & 0xFFFFu;
  if ((t & 31) == 0) mask16[t >> 5] = static_cast<uint16_t>(bits);
  __syncthreads();
  for (int c = t; c < 64 * 64; c += 128) {
    const int r = c >> 6, chunk = c & 63;
    *reinterpret_cast<uint4*>(rows + r * 512 + chunk * 8) =
        *reinterpret_cast<const uint4*>(T.ptr + matrix_offset(r, chunk));
  }
  if (t < 2) mask[t] = reinterpret_cast<const uint32_t*>(mask16)[t];
}

// Every fp32 bit pattern in [first, first + count): the relative error of ex2_approx against exp2 in
// double, the largest kept as its double bits (positive doubles order as their bits) with its x.
__global__ void ex2_error_probe(uint32_t first, uint64_t count, unsigned long long* worst) {
  unsigned long long mine = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint32_t bits = first + static_cast<uint32_t>(i);
    const float x = __uint_as_float(bits);
    const double want = exp2(static_cast<double>(x));
    const double rel = fabs(static_cast<double>(v4::ex2_approx(x)) - want) / want;
    const unsigned long long r = static_cast<unsigned long long>(__double_as_longlong(rel));
    if (r > mine) mine = r;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long other = __shfl_xor_sync(0xFFFFFFFFu, mine, o);
    mine = other > mine ? other : mine;
  }
  if ((threadIdx.x & 31) == 0) atomicMax(worst, mine);
}

// The x whose error is `worst` (a second pass: the first keeps only the value).
__global__ void ex2_worst_x_probe(uint32_t first, uint64_t count, unsigned long long worst, float* x_out,
                                  float* at_minus_inf) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(first + static_cast<uint32_t>(i));
    const double want = exp2(static_cast<double>(x));
    const double rel = fabs(static_cast<double>(v4::ex2_approx(x)) - want) / want;
    if (static_cast<unsigned long long>(__double_as_longlong(rel)) == worst) *x_out = x;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *at_minus_inf = v4::ex2_approx(-INFINITY);
}

template <class Kernel>
void allow_smem(Kernel* kernel) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
}

}  // namespace

void v4_qk_tile(const uint16_t* q, const uint16_t* k, float* s) {
  allow_smem(qk_all_probe);
  qk_all_probe<<<1, 256, kSmem>>>(q, k, s);
  CUDA_CHECK_LAUNCH();
}

void v4_pv_tile(const float* prob, const uint16_t* v, int planes, float* o) {
  if (planes == 1) {
    allow_smem(pv_regs_probe<1>);
    pv_regs_probe<1><<<1, 256, kSmem>>>(prob, v, o);
  } else {
    allow_smem(pv_regs_probe<3>);
    pv_regs_probe<3><<<1, 256, kSmem>>>(prob, v, o);
  }
  CUDA_CHECK_LAUNCH();
}

void v3_qk_tile(const uint16_t* q, const uint16_t* k, float* s) {
  allow_smem(qk_probe);
  qk_probe<<<1, 256, kSmem>>>(q, k, s);
  CUDA_CHECK_LAUNCH();
}

void v3_pv_tile(const uint16_t* p, const uint16_t* v, int planes, float* o) {
  if (planes == 1) {
    allow_smem(pv_probe<1>);
    pv_probe<1><<<1, 256, kSmem>>>(p, v, o);
  } else {
    allow_smem(pv_probe<3>);
    pv_probe<3><<<1, 256, kSmem>>>(p, v, o);
  }
  CUDA_CHECK_LAUNCH();
}

void v3_decode_block(const DecodeParams& p, int64_t row, int blk, uint16_t* rows, uint32_t* mask) {
  allow_smem(decode_block_probe);
  decode_block_probe<<<1, 128, kSmem>>>(p, row, blk, rows, mask);
  CUDA_CHECK_LAUNCH();
}

void v5_decode_block(const DecodeParams& p, int64_t row, int blk, uint16_t* rows, uint32_t* mask) {
  allow_smem(decode_block_probe_v5);
  decode_block_probe_v5<<<1, 128, kSmem>>>(p, row, blk, rows, mask);
  CUDA_CHECK_LAUNCH();
}

Ex2Error v7_ex2_error(float lo, float hi) {
  // The bit patterns of [lo, hi] are one contiguous run: increasing for x >= +0, decreasing for x <= -0.
  uint32_t a = 0, b = 0;
  std::memcpy(&a, &lo, 4);
  std::memcpy(&b, &hi, 4);
  const uint32_t first = std::signbit(hi) ? b : a, last = std::signbit(hi) ? a : b;
  const uint64_t count = static_cast<uint64_t>(last) - first + 1;
  unsigned long long* worst = nullptr;
  float* xs = nullptr;
  CUDA_CHECK(cudaMalloc(&worst, sizeof(unsigned long long)));
  CUDA_CHECK(cudaMalloc(&xs, 2 * sizeof(float)));
  CUDA_CHECK(cudaMemset(worst, 0, sizeof(unsigned long long)));
  ex2_error_probe<<<1024, 256>>>(first, count, worst);
  CUDA_CHECK_LAUNCH();
  unsigned long long w = 0;
  CUDA_CHECK(cudaMemcpy(&w, worst, sizeof w, cudaMemcpyDeviceToHost));
  ex2_worst_x_probe<<<1024, 256>>>(first, count, w, xs, xs + 1);
  CUDA_CHECK_LAUNCH();
  float host[2] = {0, 0};
  CUDA_CHECK(cudaMemcpy(host, xs, sizeof host, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(worst));
  CUDA_CHECK(cudaFree(xs));
  Ex2Error e;
  std::memcpy(&e.max_rel, &w, 8);
  e.worst_x = host[0];
  e.at_minus_inf = host[1];
  return e;
}

}  // namespace dsv4::cuda::attention::probes
