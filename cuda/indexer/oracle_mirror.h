#pragma once
// The CUDA indexer and top-k behind the oracle's own types (reference/stages/indexer.h, topk.h,
// index_lists.h), so that a verifier can run those stages on either backend: same arguments, same
// values. The projections wq_b(q_latent) and weights_proj(x) are inputs (the projection GEMMs are
// not part of these kernels; the oracle's linear gives them).
#include <cstdint>
#include <vector>

#include "cuda/common/kinds.h"
#include "cuda/indexer/formats.h"
#include "reference/config.h"
#include "reference/precision.h"
#include "reference/primitives/rope.h"
#include "reference/stages/index_lists.h"
#include "reference/tensor.h"

namespace dsv4::cuda {

// What the kernels implement of a precision policy's indexer.
struct IndexerKernelPolicy {
  IndexerFormat format = IndexerFormat::fp4;
  bool hadamard = true;
  ScoreStorage scores = ScoreStorage::bf16;
};

// The kernels' view of p; throws std::invalid_argument saying what the kernels lack for another
// policy (activations other than bf16, fp32 tensors other than fp32, an indexer format other than
// FP4 e2m1 blocks of 32 or FP8 e4m3 blocks of 128 with UE8M0 ceil scales, scores other than bf16 /
// fp32). The named policies it accepts: official, fp8-indexer, fp8-indexer-no-hadamard,
// fp4-indexer-no-hadamard, no-kv-quant.
IndexerKernelPolicy indexer_kernel_policy(const ref::PrecisionPolicy& p);

// The RoPE rows the q path reads: [s, 64], token i's (cos, sin) of pair k at [i*64 + 2k], the
// oracle's fp32 values at position start_pos + i.
std::vector<float> position_rope(const ref::RopeTable& rope, int64_t start_pos, int64_t s);

// indexer_q with q_proj = wq_b(q_latent) [s, IH*ID] (bf16 values) given -> [s, IH*ID].
ref::Mat indexer_q(const ref::Mat& q_proj, int64_t start_pos, const ref::RopeTable& rope, const ref::ModelConfig& cfg,
                   const ref::PrecisionPolicy& p, Variant v = Variant::v2);

// indexer_weights with weights_proj(x) [s, IH] (bf16 values) given -> [s, IH].
ref::Mat indexer_weights(const ref::Mat& weights_proj, const ref::ModelConfig& cfg, const ref::PrecisionPolicy& p);

// indexer_scores, the oracle's signature: q [s, IH*ID], weights [s, IH], keys [n_keys, ID] (values on
// the policy's grid) -> [s, n_keys], -inf where j >= (start_pos + i + 1) / ratio. v2 needs 64
// heads; other head counts run v1.
ref::Mat indexer_scores(const ref::Mat& q, const ref::Mat& weights, const ref::Mat& keys, int64_t start_pos, int ratio,
                        const ref::PrecisionPolicy& p, Variant v = Variant::v2);

// topk_indices, the oracle's signature and order. A NaN score is never picked (the oracle refuses
// NaN input instead).
ref::IndexMat topk_indices(const ref::Mat& scores, int k, int32_t offset, Variant v = Variant::v2);

// concat_indices(window_indices(space), indexer_topk): the attention's key list (indexer_topk may
// have 0 columns: HCA and window-only layers get their compressed list elsewhere).
ref::IndexMat attention_indices(const ref::IndexSpace& space, const ref::IndexMat& indexer_topk);

}  // namespace dsv4::cuda
