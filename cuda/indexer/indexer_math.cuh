#pragma once
// The lightning indexer's scalar arithmetic in the oracle's operation order (reference/stages/
// indexer.cpp), written once for the v1 kernels and for host code (test_cuda_host compiles it with
// g++ and checks it bit for bit against the oracle):
//   q_vector_serial  one (token, head) vector of indexer_q: RoPE on the last 64 dims, Hadamard,
//                    block quantization (codes, scale bytes, the fake-quantized bf16 values);
//   logit_serial     one score S(sum_h S(S(w_h) relu(S(q_h . k)))) with the dot product summed in
//                    double in fixed_order_dot's order and the head sum in double in head order.
// Everything the oracle computes in double is computed in double here, and every rounding is the
// oracle's (cuda/common/numerics.cuh); so v1 equals the oracle bit for bit on the same codes.
#include <cstdint>

#include "cuda/common/hadamard.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/indexer/formats.h"

namespace dsv4::cuda {

// 2^e as a double built from its bits, e in [-1022, 1023].
DSV4_HD inline double pow2d(int e) {
  const uint64_t bits = static_cast<uint64_t>(e + 1023) << 52;
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

// One quantized vector: its code bytes and its 4-byte scale word, read as UE8M0 bytes (q, dense
// keys, FP4 paged keys) or as one fp32 scale (FP8 paged keys, DeepGEMM's convention).
struct VectorView {
  const uint8_t* codes = nullptr;
  const uint8_t* scale_word = nullptr;
  IndexerFormat format = IndexerFormat::fp4;
  bool fp32_scale = false;

  // The element of dim c (on the e2m1 / e4m3 grid) and its block's scale, as exact doubles.
  DSV4_HD double element(int c) const {
    if (format == IndexerFormat::fp4) {
      const uint8_t byte = codes[c / 2];
      return e2m1_value(static_cast<uint8_t>(c % 2 == 0 ? byte & 0xf : byte >> 4));
    }
    return e4m3_value(codes[c]);
  }
  DSV4_HD double scale(int c) const {
    if (fp32_scale) {
      float s;
      memcpy(&s, scale_word, sizeof s);
      return s;
    }
    return pow2d(ue8m0_exponent(scale_word[format == IndexerFormat::fp4 ? c / 32 : 0]));
  }
  DSV4_HD double value(int c) const { return element(c) * scale(c); }  // exact: a power of two
};

// S: the rounding of the score storage (bf16 through fp32, as reference/numerics/storage.h).
DSV4_HD inline double round_score(double x, ScoreStorage s) {
  const float f = static_cast<float>(x);
  return s == ScoreStorage::bf16 ? static_cast<double>(bf16_round(f)) : static_cast<double>(f);
}

// One score: q(h) the view of head h of the query, k the key, w[h] the head weights (already
// rounded to the activation storage, as indexer_weights returns them). NaN products stay NaN.
template <class QHead>
DSV4_HD inline float logit_serial(QHead q, const float* w, const VectorView& k, int heads, ScoreStorage s) {
  double head_sum = 0;
  for (int h = 0; h < heads; ++h) {
    const VectorView qh = q(h);
    double part[4] = {0, 0, 0, 0};  // reference/primitives/dot.h fixed_order_dot
    for (int c = 0; c < kIndexerDim; c += 4)
      for (int l = 0; l < 4; ++l) part[l] += qh.value(c + l) * k.value(c + l);
    const double qk = round_score((part[0] + part[1]) + (part[2] + part[3]), s);
    const double relu = qk < 0 ? 0.0 : qk;
    head_sum += round_score(round_score(w[h], s) * relu, s);
  }
  return static_cast<float>(round_score(head_sum, s));
}

// One (token, head) vector of indexer_q. x: the 128 bf16 codes of wq_b's output for this head;
// rope_row: the 32 (cos, sin) pairs of the token's position (fp32, from the oracle's table). Writes
// code_bytes(format) code bytes, 4 scale bytes (fp8: byte 0, the rest 0) and, unless nullptr, the
// 128 fake-quantized values as bf16 codes (the oracle's indexer/q). A NaN value stays NaN in
// `values`; its code is unspecified (no e2m1 code is NaN).
DSV4_HD inline void q_vector_serial(const uint16_t* x, const float* rope_row, bool hadamard, IndexerFormat format,
                                    uint8_t* codes, uint8_t* scales, uint16_t* values) {
  float y[kIndexerDim];
  for (int c = 0; c < kIndexerDim; ++c) y[c] = bf16_value(x[c]);
  constexpr int kFirstRope = kIndexerDim - kRopeDim;
  for (int i = 0; i < kRopeDim / 2; ++i) {  // reference/primitives/rope.cpp apply_rope
    const float a = y[kFirstRope + 2 * i], b = y[kFirstRope + 2 * i + 1];
    const float c = rope_row[2 * i], s = rope_row[2 * i + 1];
    y[kFirstRope + 2 * i] = rope_re(a, b, c, s);
    y[kFirstRope + 2 * i + 1] = rope_im(a, b, c, s);
  }
  if (hadamard) {  // reference/primitives/hadamard.cpp: butterflies in double, then bf16(fp32(v n^-1/2))
    double v[kIndexerDim];
    for (int c = 0; c < kIndexerDim; ++c) v[c] = y[c];
    hadamard_serial(v, kIndexerDim);
    const double scale = 1.0 / sqrt(static_cast<double>(kIndexerDim));
    for (int c = 0; c < kIndexerDim; ++c) y[c] = bf16_round(static_cast<float>(v[c] * scale));
  }
  // reference/numerics/block_quant.cpp quantize_row with UE8M0 ceil scales; amax skips NaN.
  const int block = block_dims(format);
  for (int i = 0; i < kIndexerScaleBytes; ++i) scales[i] = 0;
  for (int b0 = 0; b0 < kIndexerDim; b0 += block) {
    float amax = 0;
    for (int c = b0; c < b0 + block; ++c)
      if (fabsf(y[c]) > amax) amax = fabsf(y[c]);
    const bool fp4 = format == IndexerFormat::fp4;
    const int e =
        fp4 ? ue8m0_ceil_exponent(amax, kFp4AmaxFloor, kFp4Max) : ue8m0_ceil_exponent(amax, kFp8AmaxFloor, kFp8Max);
    scales[b0 / block] = ue8m0_code(e);
    uint8_t low = 0;  // fp4: the even element's nibble, written with the odd one
    for (int c = b0; c < b0 + block; ++c) {
      const float q = fp4 ? fake_quant_fp4(y[c], e) : fake_quant_fp8(y[c], e);  // bf16(element * 2^e)
      if (values != nullptr) values[c] = bf16_bits(q);
      // The element, exactly (q is element * 2^e with no rounding); NaN has no e2m1 code: +6 stands
      // in, as CUDA's conversion gives.
      const float element = q != q ? (fp4 ? kFp4Max : q) : q * pow2f(-e);
      if (!fp4)
        codes[c] = e4m3_code(element);
      else if (c % 2 == 0)
        low = e2m1_code(element);
      else
        codes[c / 2] = static_cast<uint8_t>(low | (e2m1_code(element) << 4));
    }
  }
}

}  // namespace dsv4::cuda
