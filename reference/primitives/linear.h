#pragma once
// Projections. Every product here is computed in fixed-size row chunks (kLinearRowChunk rows,
// zero padded), so a token's output is bitwise the same whether it is projected alone (decode) or
// with thousands of others (prefill), and whatever the OpenMP thread count.
// The output columns (rows of W) are split into panels of kLinearColumnPanel: one task is one
// (row chunk, W panel) GEMM, tasks run panel by panel so that a panel of W stays in cache while
// every chunk uses it. Panel shapes depend on N only, so they do not affect determinism either.
#include "reference/precision.h"
#include "reference/tensor.h"

namespace dsv4::ref {

inline constexpr Index kLinearRowChunk = 48;
inline constexpr Index kLinearColumnPanel = 256;

// y = x W^T with fp64 accumulation, rounded to `out`. x [M, K], W [N, K] -> [M, N]
Mat linear_exact(const Mat& x, const Mat& W, Storage out);

// DeepSeek's fp8_gemm path: x is quantized per row in 1x128 blocks (e4m3, UE8M0 scale); W holds
// values already on an e4m3 x (power-of-two 128x128 block scale) grid. Each 128-wide K block's
// partial sum is exact in fp64 (e4m3 x e4m3 products of 128 terms fit in 53 bits), rounded to
// fp32, scaled, and accumulated in fp32 in K-block order; the output is rounded to `out`.
// x [M, K], W [N, K] -> [M, N]; K must be a multiple of 128.
Mat linear_fp8_block128(const Mat& x, const Mat& W, Storage out);

// The projection of an FP8 weight under the policy (p.fp8_linears chooses the path).
Mat linear_fp8_weight(const Mat& x, const Mat& W, const PrecisionPolicy& p);

// Quantizes W to the e4m3 grid with one power-of-two (UE8M0) scale per 128x128 block, as the
// checkpoint stores FP8 weights: the values linear_fp8_block128 expects. W [N, K]
Mat fp8_weight_fake_quant(const Mat& W);

}  // namespace dsv4::ref
