#pragma once
// The launchers behind indexer_logits_prefill / indexer_logits_decode (logits.cpp checks the
// arguments and picks the version). inexact: a device counter of FP4 query elements whose scale
// relative to their head's largest left the e4m3 grid (v2 only; nullptr: not counted).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/indexer/indexer_api.h"

namespace dsv4::cuda::detail {

void prefill_logits_v1(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                       const int32_t* ke, float* logits, int64_t n_cols, cudaStream_t stream);
void prefill_logits_v2(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                       const int32_t* ke, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream);
// FP8 keys: the persistent TMA kernel; FP4 keys (and no keys, or key codes not 16-byte aligned): v2.
void prefill_logits_v3(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                       const int32_t* ke, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream);
// v3's grid and ring, keys on the MMA's M axis (logits_prefill_v4.cu); where v3 runs v2, so does v4.
void prefill_logits_v4(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                       const int32_t* ke, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream);
void decode_logits_v1(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, cudaStream_t stream);
void decode_logits_v2(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream);
void decode_logits_v3(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream);
void decode_logits_v4(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream);
// DeepGEMM layout: v4 with bulk copies of page runs; interleaved layout: v4.
void decode_logits_v5(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream);
// DeepGEMM layout with pages of a multiple of 64 keys: v5 with a tile's copies issued by one producer
// lane and one query operand a CTA (logits_decode_v6.cu); other pages and the interleaved layout: v5.
void decode_logits_v6(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream);
// FP8 keys in DeepGEMM pages of a multiple of 64 keys: v6 with a full tile's codes copied by TMA
// into the MMA's swizzled operand layout (logits_decode_v6.cu); FP4 keys and v6's other cases: v6.
void decode_logits_v7(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream);

}  // namespace dsv4::cuda::detail
