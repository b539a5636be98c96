#pragma once
// The post-processing of one pooled entry, written as a plain loop over its d channels in the
// oracle's order (reference/stages/compressor.cpp postprocess_entries): bf16, RMSNorm (sum of
// squares in double, channel 0 first), RoPE on the last 64 dims at the entry's position, then FP8
// fake-quant of the nope dims in blocks of 64 (main) or Hadamard + FP4 in blocks of 32 (indexer).
// One thread runs it per entry in the v1 kernels; the host test runs it on the CPU.
#include <cstdint>

#include "cuda/common/hadamard.cuh"
#include "cuda/common/kinds.h"
#include "cuda/common/numerics.cuh"

namespace dsv4::cuda {

inline constexpr int kMaxIndexerDim = 128;  // the indexer's head dim (Hadamard size)

// pooled [d] fp32 -> out [d] bf16 codes. rope_row: the 64 interleaved (cos, sin) values of this
// entry's position. out doubles as the scratch of the bf16 intermediate values.
DSV4_HD inline void postprocess_entry_serial(const float* pooled, int d, Kind kind, const float* norm, double eps,
                                             const float* rope_row, uint16_t* out) {
  double sum_squares = 0;
  for (int c = 0; c < d; ++c) {
    const double x = bf16_round(pooled[c]);
    sum_squares += x * x;
  }
  const float r = rms_scale(sum_squares, d, eps);
  for (int c = 0; c < d; ++c) out[c] = bf16_bits(rms_apply(bf16_round(pooled[c]), r, norm[c]));

  const int first_rope = d - kRopeDim;
  for (int i = 0; i < kRopeDim / 2; ++i) {
    const float a = bf16_value(out[first_rope + 2 * i]);
    const float b = bf16_value(out[first_rope + 2 * i + 1]);
    const float c = rope_row[2 * i], s = rope_row[2 * i + 1];
    out[first_rope + 2 * i] = bf16_bits(rope_re(a, b, c, s));
    out[first_rope + 2 * i + 1] = bf16_bits(rope_im(a, b, c, s));
  }

  if (kind == Kind::main) {
    for (int b0 = 0; b0 < first_rope; b0 += kFp8Block) {
      float amax = 0;  // NaN never compares greater: skipped, as in the oracle
      for (int c = b0; c < b0 + kFp8Block; ++c)
        if (fabsf(bf16_value(out[c])) > amax) amax = fabsf(bf16_value(out[c]));
      const int e = ue8m0_ceil_exponent(amax, kFp8AmaxFloor, kFp8Max);
      for (int c = b0; c < b0 + kFp8Block; ++c) out[c] = bf16_bits(fake_quant_fp8(bf16_value(out[c]), e));
    }
    return;
  }

  // Indexer: natural-order Walsh-Hadamard in double, stages h = 1, 2, 4, ... as the oracle runs
  // them, then out = bf16(fp32(v * d^-1/2)); then FP4 blocks of 32 over all d dims.
  double v[kMaxIndexerDim];
  for (int c = 0; c < d; ++c) v[c] = bf16_value(out[c]);
  hadamard_serial(v, d);
  const double scale = 1.0 / sqrt(static_cast<double>(d));
  for (int c = 0; c < d; ++c) out[c] = bf16_bits(static_cast<float>(v[c] * scale));
  for (int b0 = 0; b0 < d; b0 += kFp4Block) {
    float amax = 0;
    for (int c = b0; c < b0 + kFp4Block; ++c)
      if (fabsf(bf16_value(out[c])) > amax) amax = fabsf(bf16_value(out[c]));
    const int e = ue8m0_ceil_exponent(amax, kFp4AmaxFloor, kFp4Max);
    for (int c = b0; c < b0 + kFp4Block; ++c) out[c] = bf16_bits(fake_quant_fp4(bf16_value(out[c]), e));
  }
}

}  // namespace dsv4::cuda
