#pragma once
// The lightning indexer's vector formats as its kernels store and read them (docs/cuda-indexer.md).
// A vector is one head of q or one key: 128 dims, quantized with power-of-two (UE8M0 "ceil") scales
// after RoPE and (optionally) the Hadamard rotation, as the precision policy names them:
//   fp4  e2m1, one scale per 32 dims (DeepSeek's official indexer):        64 code bytes, element 2i
//        in the low nibble of byte i, 2i+1 in the high nibble; 4 UE8M0 scale bytes
//   fp8  e4m3, one scale per 128 dims (the "fp8-indexer" policy, V3.2):    128 code bytes; 1 scale
// Scale words (4 bytes a vector): q and dense keys hold UE8M0 bytes (fp8 uses byte 0, the rest 0);
// the paged key caches hold FP4 as 4 UE8M0 bytes and FP8 as the fp32 scale (DeepGEMM's convention).
#include <cstdint>

#include "cuda/common/kinds.h"
#include "cuda/common/numerics.cuh"  // DSV4_HD

namespace dsv4::cuda {

inline constexpr int kIndexerDim = 128;  // ID: every indexer vector has 128 dims
inline constexpr int kIndexerScaleBytes = 4;

enum class IndexerFormat { fp4, fp8 };
// Where the logits round (the policy's indexer_scores): bf16 = the oracle's official order (q.k,
// relu * w and the head sum each rounded to bf16; the head sum exact before its rounding); fp32 =
// DeepGEMM's fp32 logits (sum_h w_h relu(q_h . k) accumulated in fp32, compared within a bound).
enum class ScoreStorage { bf16, fp32 };

DSV4_HD constexpr int code_bytes(IndexerFormat f) { return f == IndexerFormat::fp4 ? kIndexerDim / 2 : kIndexerDim; }
DSV4_HD constexpr int scale_blocks(IndexerFormat f) { return f == IndexerFormat::fp4 ? 4 : 1; }
DSV4_HD constexpr int block_dims(IndexerFormat f) { return kIndexerDim / scale_blocks(f); }

inline const char* format_name(IndexerFormat f) { return f == IndexerFormat::fp4 ? "fp4" : "fp8"; }
inline const char* storage_name(ScoreStorage s) { return s == ScoreStorage::bf16 ? "bf16" : "fp32"; }

}  // namespace dsv4::cuda
