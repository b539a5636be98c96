#pragma once
// Mutations: one known bug class injected at one stage (docs/math.md "Numerics variants"). A
// Mutation names the stage and the deviation; MutatedStages is a StageProvider that computes that
// stage with the deviation and every other stage as its base provider does. Two kinds:
//   numerics deviations  the stage's own function runs under a deviated PrecisionPolicy (a rounding
//                        rule of its format, the RoPE position or pairing, the ape row, the causal
//                        boundary, the softmax scale, the sink): inside the arithmetic, where only
//                        the policy can reach;
//   output deviations    the stage's result altered from outside (every element one ulp high,
//                        scaled by 1.1, one index replaced): what a wrong store or an off-by-one
//                        write does, whatever the arithmetic.
// The mutation tests make captures with a bug injected this way; the replay's diagnosis runs the
// deviations that apply to a failing stage and names the one that reproduces it.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reference/config.h"
#include "reference/precision.h"
#include "reference/stage_provider.h"
#include "reference/stage_registry.h"

namespace dsv4::ref {

enum class Deviation {
  // The stage's final block quantization (FP8 of kv / compressor/entries, FP4 of the indexer's).
  quant_skipped,       // not quantized at all
  round_toward_zero,   // elements truncated instead of rounded to nearest even
  ties_toward_zero,    // elements rounded to nearest, ties toward zero
  amax_floor_1e4,      // amax floored at 1e-4 (FP8's floor) where the format's is 6*2^-126
  amax_floor_6x2m126,  // amax floored at 6*2^-126 (FP4's floor) where the format's is 1e-4
  ue8m0_floor,         // the power-of-two scale rounded down instead of up
  // RoPE (q, kv, indexer/q, compressor entries, the inverse RoPE of attn/out_heads).
  rope_position_plus_1,   // at position t + 1 (entries: j*r + 1)
  rope_position_minus_1,  // at position t - 1
  rope_block_end,         // compressor entries at the block's last position j*r + r - 1
  rope_first_dims,        // on the first rope_dim dims of each head instead of the last
  rope_halves,            // on pairs (i, i + 32) instead of (2i, 2i + 1)
  // Compressor gate bias.
  ape_shift_plus_1,   // ape[(t + 1) mod r]
  ape_shift_minus_1,  // ape[(t - 1) mod r]
  // Indexer visibility.
  causal_plus_1,   // entry j visible to token t iff j < (t + 2) / 4
  causal_minus_1,  // entry j visible to token t iff j < t / 4
  // Sparse attention.
  softmax_scale_nope_dim,        // logits scaled by (d - rope_dim)^-1/2 instead of d^-1/2
  softmax_scale_rope_dim,        // by rope_dim^-1/2
  softmax_scale_index_head_dim,  // by index_head_dim^-1/2
  probs_fp32,                    // probabilities not rounded to bf16 before P.V
  sink_dropped,                  // the sink left out of the denominator
  // Output deviations.
  one_ulp_high,    // every element one ulp (of the stage's storage) higher
  scaled_1_1,      // every element times 1.1, rounded to the stage's storage
  scaled_0_5,      // every element times 0.5 (a scale applied twice, a wrong 1/sqrt(d))
  index_replaced,  // one index of the call's first row with an index replaced
};

struct Mutation {
  Stage stage;  // where the bug is injected: the stage that must fail first
  Deviation deviation;

  bool operator==(const Mutation&) const = default;
  // "<stage>:<deviation>", e.g. "indexer/q:ties-toward-zero", "kv:round-toward-zero".
  std::string name() const;
  // What it simulates, one phrase: "FP4 ties rounded toward zero".
  std::string describe() const;
  bool alters_output() const;  // one_ulp_high, scaled_1_1, scaled_0_5, index_replaced
  // Parses name(); throws std::invalid_argument naming the text and listing the known names.
  static Mutation parse(std::string_view text);
};

std::string_view deviation_name(Deviation d);  // "ties-toward-zero", ...

// Every mutation there is: each stage (registry order) with each deviation about what it computes
// (quantization deviations for the quantized stages, RoPE deviations for the rotated ones, ...).
std::vector<Mutation> all_mutations();
// Those of `stage` that compute something else than `policy` does with configuration cfg: the
// candidates a diagnosis tries. Left out: quantization deviations of a format the policy does not
// use or already has (its amax floor, its rounding), probabilities already in fp32, a softmax
// scale from a dim equal to head_dim.
std::vector<Mutation> mutations_of(Stage stage, const PrecisionPolicy& policy, const ModelConfig& cfg);

// The policy stage m.stage runs under (numerics deviations; `policy` itself for output ones).
// compress_ratio: the layer's (rope_block_end needs the block length: 4 for the indexer's).
PrecisionPolicy deviated_policy(const PrecisionPolicy& policy, const Mutation& m, int compress_ratio);

// The stage's result altered by an output deviation (the others leave it as it is).
//   dense: values [rows, cols] of one sequence held in `storage` (non-finite values are kept)
//   index: picks [rows, width], valid indices in [first_valid, end_valid) (indexer/topk: [offset,
//          offset + n)) and, when valid_in_row is given, valid_in_row(row, index) (a visible entry):
//          the first row lacking a valid index has its first pick replaced by the smallest one it
//          lacks; when no row lacks one, the first row with a pick loses it (-1)
void alter_output(const Mutation& m, Storage storage, Mat& values);
void alter_output(const Mutation& m, int32_t first_valid, int32_t end_valid, IndexMat& picks,
                  const std::function<bool(Index, int32_t)>& valid_in_row = {});

// `base` with mutation m injected: the entry that computes m.stage runs under the deviated policy
// (through AttentionLayer::with_policy) or has its result altered; every other entry, and that
// entry for the other compressor kind, is base's. The deviations take effect where base computes
// with the oracle's functions (the CUDA backend's kernels implement DeepSeek's numerics only).
class MutatedStages : public StageProvider {
 public:
  // Throws std::invalid_argument when m is not one of all_mutations().
  MutatedStages(const StageProvider& base, Mutation m);

  std::string name() const override;  // "<base> with <mutation>"
  bool computes(StageEntry entry) const override { return base_.computes(entry); }
  const Mutation& mutation() const { return m_; }

  Mat q_latent(const AttentionLayer& layer, const Mat& x) const override;
  Mat q_heads(const AttentionLayer& layer, const Mat& q_latent, int64_t start_pos) const override;
  Mat window_kv(const AttentionLayer& layer, const Mat& x, int64_t start_pos) const override;
  CompressorOutput compress(const AttentionLayer& layer, CompressorKind kind, const Mat& x, int64_t start_pos,
                            CompressorState& state) const override;
  Mat indexer_q(const AttentionLayer& layer, const Mat& q_latent, int64_t start_pos) const override;
  Mat indexer_weights(const AttentionLayer& layer, const Mat& x) const override;
  Mat indexer_scores(const AttentionLayer& layer, const Mat& q, const Mat& weights, const KvCache& cache, int seq,
                     int64_t start_pos) const override;
  IndexMat topk_indices(const AttentionLayer& layer, const Mat& scores, int k, int32_t offset) const override;
  IndexMat attention_indices(const AttentionLayer& layer, const IndexSpace& space,
                             const IndexMat& indexer_topk) const override;
  Mat sparse_mqa(const AttentionLayer& layer, const Mat& q, const AttentionKv& kv,
                 const IndexMat& indices) const override;
  Mat inverse_rope_heads(const AttentionLayer& layer, const Mat& core, int64_t start_pos) const override;
  Mat grouped_wo_a(const AttentionLayer& layer, const Mat& out_heads) const override;
  Mat wo_b(const AttentionLayer& layer, const Mat& wo_a) const override;

 private:
  bool targets(StageEntry entry) const { return entry == entry_; }
  // The layer the target entry runs with: deviated policy for numerics deviations.
  AttentionLayer target_layer(const AttentionLayer& layer) const;
  Mat altered(const AttentionLayer& layer, Mat values) const;

  const StageProvider& base_;
  Mutation m_;
  StageEntry entry_;
  std::optional<CompressorKind> compressor_kind_;  // the compressor a compress mutation targets
};

}  // namespace dsv4::ref
