#pragma once
// What computes the stages of a layer (docs/architecture.md "Stage providers"). A StageProvider has
// one function per entry of the stage registry (StageEntry), named and shaped as the oracle
// function it stands for (reference/stages/*.h) and bound to one layer through the AttentionLayer
// passed in (configuration, weights, precision policy, RoPE table). Each entry takes what a kernel
// takes: the attention and the indexer scores read the sequence's KV cache, not dense copies.
//
// StageProvider itself is the oracle: every entry calls the reference/ function of the same name.
// A kernel backend (verify's CUDA backend) derives from it, overrides the entries it has kernels
// for and lists them in computes(); AttentionLayer::forward runs every stage through a provider
// and does not know which code runs.
#include <cstdint>
#include <string>

#include "reference/kv_cache.h"
#include "reference/stage_registry.h"
#include "reference/stages/compressor.h"
#include "reference/stages/index_lists.h"
#include "reference/tensor.h"

namespace dsv4::ref {

class AttentionLayer;

// The kv rows sparse attention reads in one call, as a kernel receives them: the sequence's cache
// (window ring and compressed entries, in the cache's own layout) and the call's own window kv,
// addressed by the call's index space (reference/stages/index_lists.h):
//   prefill  row i < s: fresh kv row i;            row s + j: entry j
//   decode   row i < W: ring slot i (after this call's write);   row W + j: entry j
//   chunked  row i < W: ring slot i (before the call); W + i: fresh kv row i; W + s + j: entry j
// The cache must be in that state: decode after writing the call's kv, chunked before.
struct AttentionKv {
  const KvCache& cache;
  int seq = 0;
  IndexSpace space;
  const Mat& fresh;       // [s, d]: the call's window kv
  int64_t n_entries = 0;  // main compressed entries visible to the call: (start_pos + s) / r

  // The kv matrix the indices address, [space.rows(n_entries), d].
  Mat rows() const;
};

class StageProvider {
 public:
  virtual ~StageProvider() = default;

  virtual std::string name() const { return "oracle"; }
  // True when this provider computes `entry` with code of its own rather than the oracle's.
  virtual bool computes(StageEntry entry) const { return entry != StageEntry::none; }
  // Why this provider leaves `stage` to the oracle's code for a layer of configuration `config`
  // although computes() lists its entry (a kernel built for other dims); "" when it computes it.
  virtual std::string declines(Stage, const ModelConfig&) const { return ""; }

  // x [s, dim] -> q_latent [s, q_lora_rank]
  virtual Mat q_latent(const AttentionLayer& layer, const Mat& x) const;
  // q_latent [s, q_lora_rank] at positions start_pos.. -> q [s, H*d]
  virtual Mat q_heads(const AttentionLayer& layer, const Mat& q_latent, int64_t start_pos) const;
  // x [s, dim] at positions start_pos.. -> kv [s, d]
  virtual Mat window_kv(const AttentionLayer& layer, const Mat& x, int64_t start_pos) const;
  // x [s, dim] -> the entries the call completes [n_new, d]; advances `state` (the main
  // compressor's, or the indexer's for kind indexer).
  virtual CompressorOutput compress(const AttentionLayer& layer, CompressorKind kind, const Mat& x, int64_t start_pos,
                                    CompressorState& state) const;
  // q_latent [s, q_lora_rank] -> indexer/q [s, IH*ID]
  virtual Mat indexer_q(const AttentionLayer& layer, const Mat& q_latent, int64_t start_pos) const;
  // x [s, dim] -> indexer/weights [s, IH]
  virtual Mat indexer_weights(const AttentionLayer& layer, const Mat& x) const;
  // q [s, IH*ID], weights [s, IH] against the sequence's indexer keys in `cache` (entries
  // 0 .. (start_pos+s)/4 - 1, every one written) -> indexer/scores [s, (start_pos+s)/4]
  virtual Mat indexer_scores(const AttentionLayer& layer, const Mat& q, const Mat& weights, const KvCache& cache,
                             int seq, int64_t start_pos) const;
  // scores [s, n] -> indexer/topk [s, k], `offset` added, -1 padding
  virtual IndexMat topk_indices(const AttentionLayer& layer, const Mat& scores, int k, int32_t offset) const;
  // The call's window list then its compressed one (indexer_topk [s, k] for ratio 4; ignored,
  // pass an empty matrix, for the other ratios) -> topk_idxs [s, K]
  virtual IndexMat attention_indices(const AttentionLayer& layer, const IndexSpace& space,
                                     const IndexMat& indexer_topk) const;
  // q [s, H*d], the call's kv rows, indices [s, K] into them -> attn/core [s, H*d]
  virtual Mat sparse_mqa(const AttentionLayer& layer, const Mat& q, const AttentionKv& kv,
                         const IndexMat& indices) const;
  // attn/core [s, H*d] -> attn/out_heads [s, H*d]
  virtual Mat inverse_rope_heads(const AttentionLayer& layer, const Mat& core, int64_t start_pos) const;
  // attn/out_heads [s, H*d] -> attn/wo_a [s, G*o_lora_rank]
  virtual Mat grouped_wo_a(const AttentionLayer& layer, const Mat& out_heads) const;
  // attn/wo_a [s, G*o_lora_rank] -> out [s, dim]
  virtual Mat wo_b(const AttentionLayer& layer, const Mat& wo_a) const;
};

// The oracle: StageProvider with every entry its own.
const StageProvider& oracle_stages();

// The oracle's bf16 stages in two steps: each function gives the entry's value before the stage's
// final rounding (the fp32 or exact value DeepSeek's code casts to bf16: reference/stages'
// *_before_rounding), with the entry's arguments; the oracle's entry is its rounding to
// p.activations (p.indexer_scores for indexer_scores). A verifier judges a captured bf16 value
// against it (verify/compare/rounded.h); the block-quantized stages have reference/pre_quant.h.
namespace before_final_rounding {
Mat q_latent(const AttentionLayer& layer, const Mat& x);
Mat q_heads(const AttentionLayer& layer, const Mat& q_latent, int64_t start_pos);
Mat indexer_weights(const AttentionLayer& layer, const Mat& x);
Mat indexer_scores(const AttentionLayer& layer, const Mat& q, const Mat& weights, const KvCache& cache, int seq,
                   int64_t start_pos);
Mat sparse_mqa(const AttentionLayer& layer, const Mat& q, const AttentionKv& kv, const IndexMat& indices);
Mat inverse_rope_heads(const AttentionLayer& layer, const Mat& core, int64_t start_pos);
Mat grouped_wo_a(const AttentionLayer& layer, const Mat& out_heads);
Mat wo_b(const AttentionLayer& layer, const Mat& wo_a);
}  // namespace before_final_rounding

// What the layer's sparse MQA runs on: the kv rows the indices address, the sink (-inf per head
// where the policy's variant drops it) and the softmax scale (head_dim^-1/2, or the variant's
// head dim). before_final_rounding::sparse_mqa is sparse_mqa_before_rounding of these.
struct SparseMqaOperands {
  Mat kv;    // [space.rows(n_entries), d]
  Vec sink;  // [H]
  double softmax_scale = 0;
};
SparseMqaOperands sparse_mqa_operands(const AttentionLayer& layer, const AttentionKv& kv);

// Values a replay supplies in place of the layer's own, for one sequence of one call (stage-local
// replay: each stage reads the captured values of its inputs). nullptr: the layer's own value.
class StageInputs {
 public:
  virtual ~StageInputs() = default;
  // The value of stage `input` that stage `consumer` reads.
  virtual const Mat* dense(Stage input, Stage consumer) const = 0;
  virtual const IndexMat* indices(Stage input, Stage consumer) const = 0;
  // The compressor state the sequence continues from after the call (the captured state after).
  virtual const CompressorState* state_after(EntryKind kind) const = 0;
};

}  // namespace dsv4::ref
