#pragma once
// The CUDA compressors behind the oracle's own types (reference/stages/compressor.h), so that a
// verifier can run the compressor stage on either backend: same state value, same output value.
// One sequence per call; inputs are the gate projections (ref::compressor_projections gives them
// from x), since the projection GEMM is not part of these kernels. Precision: DeepSeek's official
// policy only (FP8 / FP4 block fake-quant with UE8M0 scales); the state round-trips through fp32,
// which is exact for every state the oracle builds in that policy.
#include <cstdint>
#include <vector>

#include "cuda/compressor/compressor_api.h"
#include "reference/primitives/rope.h"
#include "reference/stages/compressor.h"

namespace dsv4::cuda {

// The RoPE table the kernels read: entry j of a ratio-r compressor at position j*r, [n_entries, 64]
// with (cos, sin) of pair i at [j*64 + 2i], taken from the oracle's RopeTable (fp32 values).
std::vector<float> rope_table(const ref::RopeTable& rope, int ratio, int64_t n_entries);

Kind to_kind(ref::CompressorKind kind);

// compress(w, kind, x, start_pos, state, rope, eps, official) with x replaced by its projections:
// proj.kv, proj.score [s, coff*d] -> entries [n_new, d]; pooled is the kernel's fp32 pooling.
ref::CompressorOutput compress(const ref::CompressorWeights& w, ref::CompressorKind kind,
                               const ref::CompressorProjections& proj, int64_t start_pos, ref::CompressorState& state,
                               const ref::RopeTable& rope, double norm_eps, Variant variant = Variant::v3);

// compress_online_c128 likewise (ratio 128, main kind).
ref::CompressorOutput compress_online_c128(const ref::CompressorWeights& w, const ref::CompressorProjections& proj,
                                           int64_t start_pos, ref::OnlineC128State& state, const ref::RopeTable& rope,
                                           double norm_eps);

}  // namespace dsv4::cuda
