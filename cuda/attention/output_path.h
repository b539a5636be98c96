#pragma once
// The end of the attention on the GPU (docs/math.md "attn/out_heads, attn/wo_a"; the oracle is
// reference/stages/output_projection.h): the inverse RoPE of each head's last 64 dims at the query
// position, then the grouped low-rank projection wo_a (G groups of H/G heads, DeepSeek's bf16 einsum
// "bsgd,grd->bsgr").
//
//   inverse_rope_heads: one thread per (token, head, pair); the oracle's operation order in double
//                       (products of bf16 and fp32 values are exact), rounded to fp32 then bf16:
//                       bitwise equal to ref::inverse_rope_heads.
//   GroupedWoA:         cuBLAS strided-batched GEMM, bf16 inputs, fp32 accumulation, bf16 output
//                       (the oracle accumulates in fp64: docs/cuda-attention.md derives the bound).
// All pointers are device pointers; bf16 tensors as uint16_t codes.
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::attention {

inline constexpr int kRopeDims = 64;

// in, out [tokens, n_heads, head_dim] bf16 (out may be in); positions [tokens] int64, each in
// [0, table_positions); table [table_positions, 64] (attention_mirror.h rope_rows). The first head_dim - 64 dims of
// each head are copied, the last 64 rotated by the conjugate angle of the token's position.
// Throws std::invalid_argument for a bad shape (head_dim < 64 or odd, null pointers).
void inverse_rope_heads(const uint16_t* in, uint16_t* out, int64_t tokens, int n_heads, int head_dim,
                        const int64_t* positions, const float* table, int64_t table_positions,
                        cudaStream_t stream = nullptr);

// wo_a through cuBLAS; owns a cuBLAS handle (not thread-safe: one per stream / thread).
class GroupedWoA {
 public:
  GroupedWoA();
  ~GroupedWoA();
  GroupedWoA(const GroupedWoA&) = delete;
  GroupedWoA& operator=(const GroupedWoA&) = delete;

  // o [tokens, groups * group_width] bf16 (group g = columns [g*group_width, (g+1)*group_width)),
  // wo_a [groups * rank, group_width] bf16 (group g = rows [g*rank, (g+1)*rank))
  //   -> out [tokens, groups * rank] bf16, out[:, g*rank + r] = sum_k o[:, g*group_width + k] wo_a[g*rank + r, k].
  void run(const uint16_t* o, const uint16_t* wo_a, uint16_t* out, int64_t tokens, int groups, int group_width,
           int rank, cudaStream_t stream = nullptr);

 private:
  void* handle_ = nullptr;  // cublasHandle_t
};

}  // namespace dsv4::cuda::attention
