// The mutation catalogue: which deviation applies to which stage, the policy it runs under, the
// output alterations, and the provider that injects one.
#include "reference/mutation.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>

#include "reference/layer.h"
#include "reference/numerics/bf16.h"
#include "reference/numerics/storage.h"

namespace dsv4::ref {
namespace {

constexpr Deviation kAllDeviations[] = {
    Deviation::quant_skipped,
    Deviation::round_toward_zero,
    Deviation::ties_toward_zero,
    Deviation::amax_floor_1e4,
    Deviation::amax_floor_6x2m126,
    Deviation::ue8m0_floor,
    Deviation::rope_position_plus_1,
    Deviation::rope_position_minus_1,
    Deviation::rope_block_end,
    Deviation::rope_first_dims,
    Deviation::rope_halves,
    Deviation::ape_shift_plus_1,
    Deviation::ape_shift_minus_1,
    Deviation::causal_plus_1,
    Deviation::causal_minus_1,
    Deviation::softmax_scale_nope_dim,
    Deviation::softmax_scale_rope_dim,
    Deviation::softmax_scale_index_head_dim,
    Deviation::probs_fp32,
    Deviation::sink_dropped,
    Deviation::one_ulp_high,
    Deviation::scaled_1_1,
    Deviation::scaled_0_5,
    Deviation::index_replaced,
};

constexpr float kFp8AmaxFloor = 1e-4f;
constexpr float kFp4AmaxFloor = 6.0f * 0x1p-126f;

bool is_indexer_stage(Stage s) { return stage(s).name.starts_with("indexer/"); }

// The stages whose last step is a block quantization, and which of the policy's formats it is.
bool quantized(Stage s) {
  return s == Stage::kv || s == Stage::compressor_entries || s == Stage::indexer_q ||
         s == Stage::indexer_compressor_entries;
}
const std::optional<BlockFormat>& format_of(Stage s, const PrecisionPolicy& p) {
  return is_indexer_stage(s) ? p.indexer_qk : p.kv_nope;
}
std::optional<BlockFormat>& format_of(Stage s, PrecisionPolicy& p) {
  return is_indexer_stage(s) ? p.indexer_qk : p.kv_nope;
}

bool compressor_entries(Stage s) { return s == Stage::compressor_entries || s == Stage::indexer_compressor_entries; }
bool rotated(Stage s) {
  return s == Stage::q || s == Stage::kv || s == Stage::indexer_q || compressor_entries(s) ||
         s == Stage::attn_out_heads;
}
bool gated(Stage s) {
  return compressor_entries(s) || s == Stage::compressor_state_score || s == Stage::indexer_compressor_state_score;
}

enum class Family { quantization, rope, ape, causal, attention, output_dense, output_index };

Family family(Deviation d) {
  switch (d) {
    case Deviation::quant_skipped:
    case Deviation::round_toward_zero:
    case Deviation::ties_toward_zero:
    case Deviation::amax_floor_1e4:
    case Deviation::amax_floor_6x2m126:
    case Deviation::ue8m0_floor: return Family::quantization;
    case Deviation::rope_position_plus_1:
    case Deviation::rope_position_minus_1:
    case Deviation::rope_block_end:
    case Deviation::rope_first_dims:
    case Deviation::rope_halves: return Family::rope;
    case Deviation::ape_shift_plus_1:
    case Deviation::ape_shift_minus_1: return Family::ape;
    case Deviation::causal_plus_1:
    case Deviation::causal_minus_1: return Family::causal;
    case Deviation::softmax_scale_nope_dim:
    case Deviation::softmax_scale_rope_dim:
    case Deviation::softmax_scale_index_head_dim:
    case Deviation::probs_fp32:
    case Deviation::sink_dropped: return Family::attention;
    case Deviation::one_ulp_high:
    case Deviation::scaled_1_1:
    case Deviation::scaled_0_5: return Family::output_dense;
    case Deviation::index_replaced: return Family::output_index;
  }
  throw std::invalid_argument("unknown Deviation " + std::to_string(static_cast<int>(d)));
}

// Whether the deviation is about what `stage` computes at all (whatever the policy).
bool applies(Deviation d, Stage s) {
  const StageDef& def = stage(s);
  switch (family(d)) {
    case Family::quantization: return quantized(s);
    case Family::rope: return d == Deviation::rope_block_end ? compressor_entries(s) : rotated(s);
    case Family::ape: return gated(s);
    case Family::causal: return s == Stage::indexer_scores;
    case Family::attention: return s == Stage::attn_core;
    case Family::output_dense: return def.comparison == Comparison::dense;
    case Family::output_index: return def.comparison == Comparison::index_set;
  }
  return false;
}

// Whether, under policy p and configuration cfg, the deviation computes something else than the policy does.
bool changes_anything(Deviation d, Stage s, const PrecisionPolicy& p, const ModelConfig& cfg) {
  switch (d) {
    case Deviation::probs_fp32: return p.attn_probs == Storage::bf16;
    case Deviation::softmax_scale_nope_dim: return cfg.nope_dim() != cfg.head_dim;
    case Deviation::softmax_scale_rope_dim: return cfg.rope_head_dim != cfg.head_dim;
    case Deviation::softmax_scale_index_head_dim: return cfg.index_head_dim != cfg.head_dim;
    default: break;
  }
  if (family(d) != Family::quantization) return true;
  const std::optional<BlockFormat>& f = format_of(s, p);
  if (!f) return false;
  const bool floored_rule = f->scale == ScaleRule::ue8m0_ceil || f->scale == ScaleRule::fp32_amax;
  switch (d) {
    case Deviation::quant_skipped: return true;
    case Deviation::round_toward_zero:
    case Deviation::ties_toward_zero: return f->rounding == ElementRounding::nearest_even;
    case Deviation::amax_floor_1e4: return floored_rule && f->amax_floor() != kFp8AmaxFloor;
    case Deviation::amax_floor_6x2m126: return floored_rule && f->amax_floor() != kFp4AmaxFloor;
    case Deviation::ue8m0_floor: return f->scale == ScaleRule::ue8m0_ceil;
    default: return true;
  }
}

// The next value above v in storage s (v on that storage's grid); non-finite values are kept.
double next_up(Storage s, double v) {
  if (!std::isfinite(v)) return v;
  switch (s) {
    case Storage::fp64: return std::nextafter(v, std::numeric_limits<double>::infinity());
    case Storage::fp32: return std::nextafter(static_cast<float>(v), std::numeric_limits<float>::infinity());
    case Storage::bf16: {
      const uint16_t b = bf16_encode(static_cast<float>(v));
      if ((b & 0x7fffu) == 0) return bf16_decode(0x0001);                        // +-0: the smallest positive bf16
      return bf16_decode(static_cast<uint16_t>((b & 0x8000u) ? b - 1 : b + 1));  // negative: toward zero
    }
  }
  return v;
}

}  // namespace

std::string_view deviation_name(Deviation d) {
  switch (d) {
    case Deviation::quant_skipped: return "quant-skipped";
    case Deviation::round_toward_zero: return "round-toward-zero";
    case Deviation::ties_toward_zero: return "ties-toward-zero";
    case Deviation::amax_floor_1e4: return "amax-floor-1e-4";
    case Deviation::amax_floor_6x2m126: return "amax-floor-6x2^-126";
    case Deviation::ue8m0_floor: return "ue8m0-floor";
    case Deviation::rope_position_plus_1: return "rope-position+1";
    case Deviation::rope_position_minus_1: return "rope-position-1";
    case Deviation::rope_block_end: return "rope-block-end";
    case Deviation::rope_first_dims: return "rope-first-dims";
    case Deviation::rope_halves: return "rope-halves";
    case Deviation::ape_shift_plus_1: return "ape-shift+1";
    case Deviation::ape_shift_minus_1: return "ape-shift-1";
    case Deviation::causal_plus_1: return "causal+1";
    case Deviation::causal_minus_1: return "causal-1";
    case Deviation::softmax_scale_nope_dim: return "softmax-scale-nope-dim";
    case Deviation::softmax_scale_rope_dim: return "softmax-scale-rope-dim";
    case Deviation::softmax_scale_index_head_dim: return "softmax-scale-index-head-dim";
    case Deviation::probs_fp32: return "probs-fp32";
    case Deviation::sink_dropped: return "sink-dropped";
    case Deviation::one_ulp_high: return "one-ulp-high";
    case Deviation::scaled_1_1: return "scaled-1.1";
    case Deviation::scaled_0_5: return "scaled-0.5";
    case Deviation::index_replaced: return "index-replaced";
  }
  return "";
}

std::string Mutation::name() const {
  return std::string(ref::stage(stage).name) + ":" + std::string(deviation_name(deviation));
}

std::string Mutation::describe() const {
  const std::string format = is_indexer_stage(stage) ? "FP4" : "FP8";
  switch (deviation) {
    case Deviation::quant_skipped: return format + " quantization skipped";
    case Deviation::round_toward_zero:
      return format + " elements truncated (rounded toward zero) instead of to nearest even";
    case Deviation::ties_toward_zero: return format + " ties rounded toward zero instead of to even";
    case Deviation::amax_floor_1e4: return format + " amax floored at 1e-4 instead of 6*2^-126";
    case Deviation::amax_floor_6x2m126: return format + " amax floored at 6*2^-126 instead of 1e-4";
    case Deviation::ue8m0_floor: return "UE8M0 scale rounded down (floor) instead of up (ceil)";
    case Deviation::rope_position_plus_1: return "RoPE at position t+1";
    case Deviation::rope_position_minus_1: return "RoPE at position t-1";
    case Deviation::rope_block_end: return "RoPE at the block's last position j*r+r-1 instead of j*r";
    case Deviation::rope_first_dims: return "RoPE on the first rope_dim dims instead of the last";
    case Deviation::rope_halves: return "RoPE on halves (i, i+32) instead of interleaved pairs";
    case Deviation::ape_shift_plus_1: return "compressor ape shifted by one (ape[(t+1) mod r])";
    case Deviation::ape_shift_minus_1: return "compressor ape shifted by one (ape[(t-1) mod r])";
    case Deviation::causal_plus_1: return "causal boundary one entry late (j < (t+2)/4 visible)";
    case Deviation::causal_minus_1: return "causal boundary one entry early (j < t/4 visible)";
    case Deviation::softmax_scale_nope_dim: return "softmax scale from the nope dims (d-64)^-1/2";
    case Deviation::softmax_scale_rope_dim: return "softmax scale from the rope dims 64^-1/2";
    case Deviation::softmax_scale_index_head_dim: return "softmax scale from index_head_dim^-1/2";
    case Deviation::probs_fp32: return "probabilities not rounded to bf16 before P.V";
    case Deviation::sink_dropped: return "attention sink dropped";
    case Deviation::one_ulp_high: return "every element one ulp high";
    case Deviation::scaled_1_1: return "every element scaled by 1.1";
    case Deviation::scaled_0_5: return "every element scaled by 0.5";
    case Deviation::index_replaced: return "one index replaced";
  }
  return "";
}

bool Mutation::alters_output() const {
  const Family f = family(deviation);
  return f == Family::output_dense || f == Family::output_index;
}

Mutation Mutation::parse(std::string_view text) {
  const size_t colon = text.find(':');
  const StageDef* s = colon == std::string_view::npos ? nullptr : find_stage(text.substr(0, colon));
  if (s != nullptr) {
    const std::string_view dev = text.substr(colon + 1);
    for (Deviation d : kAllDeviations)
      if (deviation_name(d) == dev && applies(d, s->id)) return Mutation{s->id, d};
  }
  std::string known;
  for (const Mutation& m : all_mutations()) known += (known.empty() ? "" : ", ") + m.name();
  throw std::invalid_argument("mutation '" + std::string(text) + "': expected <stage>:<deviation>, one of " + known);
}

std::vector<Mutation> all_mutations() {
  std::vector<Mutation> out;
  for (const StageDef& s : stages())
    for (Deviation d : kAllDeviations)
      if (applies(d, s.id)) out.push_back({s.id, d});
  return out;
}

std::vector<Mutation> mutations_of(Stage s, const PrecisionPolicy& policy, const ModelConfig& cfg) {
  std::vector<Mutation> out;
  for (Deviation d : kAllDeviations)
    if (applies(d, s) && changes_anything(d, s, policy, cfg)) out.push_back({s, d});
  return out;
}

PrecisionPolicy deviated_policy(const PrecisionPolicy& policy, const Mutation& m, int compress_ratio) {
  PrecisionPolicy p = policy;
  NumericsVariant& v = p.variant;
  if (family(m.deviation) == Family::quantization) {
    std::optional<BlockFormat>& f = format_of(m.stage, p);
    if (!f)
      throw std::invalid_argument("mutation " + m.name() + ": policy " + policy.name + " does not quantize " +
                                  std::string(stage(m.stage).name));
    switch (m.deviation) {
      case Deviation::quant_skipped: f.reset(); break;
      case Deviation::round_toward_zero: f->rounding = ElementRounding::toward_zero; break;
      case Deviation::ties_toward_zero: f->rounding = ElementRounding::nearest_ties_toward_zero; break;
      case Deviation::amax_floor_1e4: f->custom_amax_floor = kFp8AmaxFloor; break;
      case Deviation::amax_floor_6x2m126: f->custom_amax_floor = kFp4AmaxFloor; break;
      case Deviation::ue8m0_floor: f->scale = ScaleRule::ue8m0_floor; break;
      default: break;
    }
    return p;
  }
  switch (m.deviation) {
    case Deviation::rope_position_plus_1: v.rope_position_shift = 1; break;
    case Deviation::rope_position_minus_1: v.rope_position_shift = -1; break;
    case Deviation::rope_block_end: v.rope_position_shift = (is_indexer_stage(m.stage) ? 4 : compress_ratio) - 1; break;
    case Deviation::rope_first_dims: v.rope_pairs = RopePairs::first_interleaved; break;
    case Deviation::rope_halves: v.rope_pairs = RopePairs::last_halves; break;
    case Deviation::ape_shift_plus_1: v.ape_shift = 1; break;
    case Deviation::ape_shift_minus_1: v.ape_shift = -1; break;
    case Deviation::causal_plus_1: v.causal_shift = 1; break;
    case Deviation::causal_minus_1: v.causal_shift = -1; break;
    case Deviation::softmax_scale_nope_dim: v.softmax_scale_dim = SoftmaxScaleDim::nope_dim; break;
    case Deviation::softmax_scale_rope_dim: v.softmax_scale_dim = SoftmaxScaleDim::rope_dim; break;
    case Deviation::softmax_scale_index_head_dim: v.softmax_scale_dim = SoftmaxScaleDim::index_head_dim; break;
    case Deviation::probs_fp32: p.attn_probs = Storage::fp32; break;
    case Deviation::sink_dropped: v.attn_sink = false; break;
    default: break;  // output deviations: the policy itself
  }
  return p;
}

void alter_output(const Mutation& m, Storage storage, Mat& values) {
  switch (m.deviation) {
    case Deviation::one_ulp_high: values = values.unaryExpr([storage](double v) { return next_up(storage, v); }); break;
    case Deviation::scaled_1_1:
      values = values.unaryExpr([storage](double v) { return std::isfinite(v) ? round_to(storage, v * 1.1) : v; });
      break;
    case Deviation::scaled_0_5:  // exact on every grid above its subnormals (FP4 and FP8 values stay on their grid)
      values = values.unaryExpr([storage](double v) { return std::isfinite(v) ? round_to(storage, v * 0.5) : v; });
      break;
    default: break;
  }
}

// The first row that has a pick and lacks a valid index: its first pick becomes the smallest valid
// index it lacks. When every row with a pick holds every valid index, the first such row loses
// its first pick (-1). A row never holds an index twice (that would be no index set at all).
void alter_output(const Mutation& m, int32_t first_valid, int32_t end_valid, IndexMat& picks,
                  const std::function<bool(Index, int32_t)>& valid_in_row) {
  if (m.deviation != Deviation::index_replaced) return;
  Index first_row = -1;
  for (Index i = 0; i < picks.rows(); ++i) {
    std::set<int32_t> held;
    Index first_slot = -1;
    for (Index c = 0; c < picks.cols(); ++c)
      if (picks(i, c) != -1) {
        held.insert(picks(i, c));
        if (first_slot < 0) first_slot = c;
      }
    if (first_slot < 0) continue;
    if (first_row < 0) first_row = i;
    for (int32_t u = first_valid; u < end_valid; ++u)
      if (!held.contains(u) && (!valid_in_row || valid_in_row(i, u))) {
        picks(i, first_slot) = u;
        return;
      }
  }
  if (first_row < 0) return;
  for (Index c = 0; c < picks.cols(); ++c)
    if (picks(first_row, c) != -1) {
      picks(first_row, c) = -1;
      return;
    }
}

MutatedStages::MutatedStages(const StageProvider& base, Mutation m) : base_(base), m_(m), entry_(stage(m.stage).entry) {
  if (!applies(m.deviation, m.stage))
    throw std::invalid_argument("MutatedStages: " + m.name() + " is not a mutation of stage " +
                                std::string(stage(m.stage).name));
  if (entry_ == StageEntry::compress)
    compressor_kind_ = is_indexer_stage(m.stage) ? CompressorKind::indexer : CompressorKind::main;
}

std::string MutatedStages::name() const { return base_.name() + " with " + m_.name(); }

AttentionLayer MutatedStages::target_layer(const AttentionLayer& layer) const {
  return layer.with_policy(deviated_policy(layer.policy(), m_, layer.compress_ratio()));
}

Mat MutatedStages::altered(const AttentionLayer& layer, Mat values) const {
  alter_output(m_, stage(m_.stage).storage(layer.policy()), values);
  return values;
}

Mat MutatedStages::q_latent(const AttentionLayer& layer, const Mat& x) const {
  if (!targets(StageEntry::q_latent)) return base_.q_latent(layer, x);
  return altered(layer, base_.q_latent(target_layer(layer), x));
}

Mat MutatedStages::q_heads(const AttentionLayer& layer, const Mat& q_latent, int64_t start_pos) const {
  if (!targets(StageEntry::q_heads)) return base_.q_heads(layer, q_latent, start_pos);
  return altered(layer, base_.q_heads(target_layer(layer), q_latent, start_pos));
}

Mat MutatedStages::window_kv(const AttentionLayer& layer, const Mat& x, int64_t start_pos) const {
  if (!targets(StageEntry::window_kv)) return base_.window_kv(layer, x, start_pos);
  return altered(layer, base_.window_kv(target_layer(layer), x, start_pos));
}

CompressorOutput MutatedStages::compress(const AttentionLayer& layer, CompressorKind kind, const Mat& x,
                                         int64_t start_pos, CompressorState& state) const {
  if (!targets(StageEntry::compress) || kind != compressor_kind_)
    return base_.compress(layer, kind, x, start_pos, state);
  CompressorOutput out = base_.compress(target_layer(layer), kind, x, start_pos, state);
  if (compressor_entries(m_.stage)) out.entries = altered(layer, std::move(out.entries));
  return out;
}

Mat MutatedStages::indexer_q(const AttentionLayer& layer, const Mat& q_latent, int64_t start_pos) const {
  if (!targets(StageEntry::indexer_q)) return base_.indexer_q(layer, q_latent, start_pos);
  return altered(layer, base_.indexer_q(target_layer(layer), q_latent, start_pos));
}

Mat MutatedStages::indexer_weights(const AttentionLayer& layer, const Mat& x) const {
  if (!targets(StageEntry::indexer_weights)) return base_.indexer_weights(layer, x);
  return altered(layer, base_.indexer_weights(target_layer(layer), x));
}

Mat MutatedStages::indexer_scores(const AttentionLayer& layer, const Mat& q, const Mat& weights, const KvCache& cache,
                                  int seq, int64_t start_pos) const {
  if (!targets(StageEntry::indexer_scores)) return base_.indexer_scores(layer, q, weights, cache, seq, start_pos);
  return altered(layer, base_.indexer_scores(target_layer(layer), q, weights, cache, seq, start_pos));
}

IndexMat MutatedStages::topk_indices(const AttentionLayer& layer, const Mat& scores, int k, int32_t offset) const {
  IndexMat picks = base_.topk_indices(layer, scores, k, offset);
  if (targets(StageEntry::topk_indices))  // only entries the row can see (a finite score)
    alter_output(m_, offset, offset + static_cast<int32_t>(scores.cols()), picks,
                 [&scores, offset](Index row, int32_t u) { return std::isfinite(scores(row, u - offset)); });
  return picks;
}

IndexMat MutatedStages::attention_indices(const AttentionLayer& layer, const IndexSpace& space,
                                          const IndexMat& indexer_topk) const {
  IndexMat picks = base_.attention_indices(layer, space, indexer_topk);
  if (targets(StageEntry::attention_indices)) {
    const int ratio = layer.compress_ratio();
    const int64_t entries = ratio == 0 ? 0 : (space.start_pos + space.seqlen) / ratio;
    alter_output(m_, 0, static_cast<int32_t>(space.rows(entries)), picks);
  }
  return picks;
}

Mat MutatedStages::sparse_mqa(const AttentionLayer& layer, const Mat& q, const AttentionKv& kv,
                              const IndexMat& indices) const {
  if (!targets(StageEntry::sparse_mqa)) return base_.sparse_mqa(layer, q, kv, indices);
  return altered(layer, base_.sparse_mqa(target_layer(layer), q, kv, indices));
}

Mat MutatedStages::inverse_rope_heads(const AttentionLayer& layer, const Mat& core, int64_t start_pos) const {
  if (!targets(StageEntry::inverse_rope_heads)) return base_.inverse_rope_heads(layer, core, start_pos);
  return altered(layer, base_.inverse_rope_heads(target_layer(layer), core, start_pos));
}

Mat MutatedStages::grouped_wo_a(const AttentionLayer& layer, const Mat& out_heads) const {
  if (!targets(StageEntry::grouped_wo_a)) return base_.grouped_wo_a(layer, out_heads);
  return altered(layer, base_.grouped_wo_a(target_layer(layer), out_heads));
}

Mat MutatedStages::wo_b(const AttentionLayer& layer, const Mat& wo_a) const {
  if (!targets(StageEntry::wo_b)) return base_.wo_b(layer, wo_a);
  return altered(layer, base_.wo_b(target_layer(layer), wo_a));
}

}  // namespace dsv4::ref
