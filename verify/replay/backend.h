#pragma once
// What computes each stage during a replay. A Backend has one function per stage, with the oracle
// function's signature (reference/stages/*.h) bound to one layer: its configuration, weights,
// precision policy and RoPE table, as a ref::AttentionLayer holds them. The oracle implements every
// stage; another backend (the CUDA kernels) overrides the stages it has and inherits the rest, so
// the replay engine swaps backends without knowing which code runs.
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "reference/layer.h"
#include "reference/stages/compressor.h"
#include "reference/stages/index_lists.h"
#include "reference/tensor.h"

namespace dsv4::verify {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  // The stages this backend computes with code of its own (the rest come from the oracle), e.g.
  // "compressor/entries"; used to say in the report who computed what.
  virtual bool computes(std::string_view stage) const = 0;

  // x [s, dim] -> q_latent [s, q_lora_rank]
  virtual ref::Mat q_latent(const ref::AttentionLayer& layer, const ref::Mat& x) const = 0;
  // q_latent [s, q_lora_rank] at positions start_pos.. -> q [s, H*d]
  virtual ref::Mat q(const ref::AttentionLayer& layer, const ref::Mat& q_latent, int64_t start_pos) const = 0;
  // x [s, dim] -> kv [s, d]
  virtual ref::Mat kv(const ref::AttentionLayer& layer, const ref::Mat& x, int64_t start_pos) const = 0;
  // x [s, dim] -> entries [n_new, d]; advances `state` (the main or the indexer's compressor).
  virtual ref::CompressorOutput compress(const ref::AttentionLayer& layer, ref::CompressorKind kind, const ref::Mat& x,
                                         int64_t start_pos, ref::CompressorState& state) const = 0;
  // q_latent [s, q_lora_rank] -> indexer/q [s, IH*ID]
  virtual ref::Mat indexer_q(const ref::AttentionLayer& layer, const ref::Mat& q_latent, int64_t start_pos) const = 0;
  // x [s, dim] -> indexer/weights [s, IH]
  virtual ref::Mat indexer_weights(const ref::AttentionLayer& layer, const ref::Mat& x) const = 0;
  // q [s, IH*ID], weights [s, IH], keys [(start_pos+s)/4, ID] -> indexer/scores [s, (start_pos+s)/4]
  virtual ref::Mat indexer_scores(const ref::AttentionLayer& layer, const ref::Mat& q, const ref::Mat& weights,
                                  const ref::Mat& keys, int64_t start_pos) const = 0;
  // scores [s, n] -> indexer/topk [s, k], offset added, -1 padding
  virtual ref::IndexMat indexer_topk(const ref::AttentionLayer& layer, const ref::Mat& scores, int k,
                                     int32_t offset) const = 0;
  // The call's window list, then the compressed one: indexer_topk [s, k] for ratio 4 (ignored for
  // the other ratios, pass an empty matrix). -> topk_idxs [s, K]
  virtual ref::IndexMat topk_idxs(const ref::AttentionLayer& layer, const ref::IndexSpace& space,
                                  const ref::IndexMat& indexer_topk) const = 0;
  // q [s, H*d], kv_rows [rows of the call's index space, d], indices [s, K] -> attn/core [s, H*d]
  virtual ref::Mat attn_core(const ref::AttentionLayer& layer, const ref::Mat& q, const ref::Mat& kv_rows,
                             const ref::IndexMat& indices) const = 0;
  // attn/core [s, H*d] -> attn/out_heads [s, H*d]
  virtual ref::Mat attn_out_heads(const ref::AttentionLayer& layer, const ref::Mat& core, int64_t start_pos) const = 0;
  // attn/out_heads [s, H*d] -> attn/wo_a [s, G*o_lora_rank]
  virtual ref::Mat attn_wo_a(const ref::AttentionLayer& layer, const ref::Mat& out_heads) const = 0;
  // attn/wo_a [s, G*o_lora_rank] -> out [s, dim]
  virtual ref::Mat out(const ref::AttentionLayer& layer, const ref::Mat& wo_a) const = 0;
};

// The CPU oracle (reference/), every stage.
class OracleBackend : public Backend {
 public:
  std::string name() const override { return "oracle"; }
  bool computes(std::string_view) const override { return true; }
  ref::Mat q_latent(const ref::AttentionLayer& layer, const ref::Mat& x) const override;
  ref::Mat q(const ref::AttentionLayer& layer, const ref::Mat& q_latent, int64_t start_pos) const override;
  ref::Mat kv(const ref::AttentionLayer& layer, const ref::Mat& x, int64_t start_pos) const override;
  ref::CompressorOutput compress(const ref::AttentionLayer& layer, ref::CompressorKind kind, const ref::Mat& x,
                                 int64_t start_pos, ref::CompressorState& state) const override;
  ref::Mat indexer_q(const ref::AttentionLayer& layer, const ref::Mat& q_latent, int64_t start_pos) const override;
  ref::Mat indexer_weights(const ref::AttentionLayer& layer, const ref::Mat& x) const override;
  ref::Mat indexer_scores(const ref::AttentionLayer& layer, const ref::Mat& q, const ref::Mat& weights,
                          const ref::Mat& keys, int64_t start_pos) const override;
  ref::IndexMat indexer_topk(const ref::AttentionLayer& layer, const ref::Mat& scores, int k,
                             int32_t offset) const override;
  ref::IndexMat topk_idxs(const ref::AttentionLayer& layer, const ref::IndexSpace& space,
                          const ref::IndexMat& indexer_topk) const override;
  ref::Mat attn_core(const ref::AttentionLayer& layer, const ref::Mat& q, const ref::Mat& kv_rows,
                     const ref::IndexMat& indices) const override;
  ref::Mat attn_out_heads(const ref::AttentionLayer& layer, const ref::Mat& core, int64_t start_pos) const override;
  ref::Mat attn_wo_a(const ref::AttentionLayer& layer, const ref::Mat& out_heads) const override;
  ref::Mat out(const ref::AttentionLayer& layer, const ref::Mat& wo_a) const override;
};

// A backend that cannot run here (not built, no device, a precision it does not implement).
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "oracle" or "cuda"; `precision` is the policy the replay runs. Throws BackendUnavailable saying why
// (e.g. "cuda backend not built / no GPU: ..."), std::invalid_argument for an unknown name.
std::unique_ptr<Backend> make_backend(const std::string& name, const std::string& precision);

// The CUDA backend (cuda_backend.cpp): the compressor stages on the GPU kernels of cuda/compressor
// when the build has them (DSV4_HAVE_CUDA), every other stage from the oracle. Throws
// BackendUnavailable when not built, without a usable GPU, or for a precision other than official.
std::unique_ptr<Backend> make_cuda_backend(const std::string& precision);

}  // namespace dsv4::verify
