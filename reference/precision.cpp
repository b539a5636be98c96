// The named precision policies: the mathematics, DeepSeek's code, and the alternatives the
// accuracy report compares.
#include "reference/precision.h"

#include <algorithm>
#include <stdexcept>
#include <string_view>

namespace dsv4::ref {

namespace {

std::string linear_kind_name(LinearKind k) {
  switch (k) {
    case LinearKind::exact: return "exact";
    case LinearKind::fp8_block128: return "fp8_block128";
  }
  throw std::invalid_argument("unknown LinearKind " + std::to_string(static_cast<int>(k)));
}

std::string format_name(const std::optional<BlockFormat>& f) { return f ? f->name() : "none"; }

// The indexer q/k format, marked when only the compressed keys are quantized.
std::string indexer_qk_name(const PrecisionPolicy& p) {
  return format_name(p.indexer_qk) + (p.indexer_qk && !p.indexer_q_quant ? "(keys-only)" : "");
}

std::string on_off(bool b) { return b ? "on" : "off"; }

PrecisionPolicy renamed(PrecisionPolicy p, const std::string& name) {
  p.name = name;
  return p;
}

// No quantization and one storage everywhere, computed as the mathematics otherwise.
PrecisionPolicy uniform(const std::string& name, Storage s) {
  PrecisionPolicy p;
  p.name = name;
  p.activations = s;
  p.fp32_tensors = s;
  p.fp8_linears = LinearKind::exact;
  p.kv_nope.reset();
  p.indexer_qk.reset();
  p.indexer_scores = s;
  p.attn_probs = s;
  return p;
}

}  // namespace

PrecisionPolicy PrecisionPolicy::exact() {
  // The Hadamard rotation is orthogonal, so leaving it on changes no exact result; it keeps the
  // indexer's q and k in the same basis as in every other policy.
  PrecisionPolicy p = uniform("exact", Storage::fp64);
  p.indexer_hadamard = true;
  p.attn_online_blocks = false;
  return p;
}

PrecisionPolicy PrecisionPolicy::official() {
  PrecisionPolicy p;  // the defaults of precision.h are DeepSeek's storages
  p.name = "official";
  p.kv_nope = BlockFormat::fp8_kv();
  p.indexer_qk = BlockFormat::fp4_indexer();
  return p;
}

std::vector<PrecisionPolicy> PrecisionPolicy::all_named() {
  const PrecisionPolicy off = official();

  PrecisionPolicy fp8_indexer = renamed(off, "fp8-indexer");
  fp8_indexer.indexer_qk = BlockFormat::fp8_per_head(128);  // V3.2: one UE8M0 scale per 128-d head

  PrecisionPolicy fp8_indexer_no_hadamard = renamed(fp8_indexer, "fp8-indexer-no-hadamard");
  fp8_indexer_no_hadamard.indexer_hadamard = false;

  PrecisionPolicy fp4_indexer_no_hadamard = renamed(off, "fp4-indexer-no-hadamard");
  fp4_indexer_no_hadamard.indexer_hadamard = false;

  PrecisionPolicy no_kv_quant = renamed(off, "no-kv-quant");
  no_kv_quant.kv_nope.reset();

  PrecisionPolicy mxfp4_indexer = renamed(off, "mxfp4-indexer");
  mxfp4_indexer.indexer_qk = BlockFormat::mxfp4();

  PrecisionPolicy nvfp4_indexer = renamed(off, "nvfp4-indexer");
  nvfp4_indexer.indexer_qk = BlockFormat::nvfp4();

  // One switch of official each: the probabilities before P.V, the indexer's score storage, the
  // indexer q left unquantized (FP4 keys as official; FP8 keys as fp8-indexer).
  PrecisionPolicy fp32_probs = renamed(off, "fp32-probs");
  fp32_probs.attn_probs = Storage::fp32;

  PrecisionPolicy fp32_indexer_scores = renamed(off, "fp32-indexer-scores");
  fp32_indexer_scores.indexer_scores = Storage::fp32;

  PrecisionPolicy fp8_indexer_keys_only = renamed(fp8_indexer, "fp8-indexer-keys-only");
  fp8_indexer_keys_only.indexer_q_quant = false;

  PrecisionPolicy fp4_indexer_keys_only = renamed(off, "fp4-indexer-keys-only");
  fp4_indexer_keys_only.indexer_q_quant = false;

  return {exact(),
          off,
          fp8_indexer,
          fp8_indexer_no_hadamard,
          fp4_indexer_no_hadamard,
          no_kv_quant,
          uniform("bf16", Storage::bf16),
          uniform("fp32", Storage::fp32),
          mxfp4_indexer,
          nvfp4_indexer,
          fp32_probs,
          fp32_indexer_scores,
          fp8_indexer_keys_only,
          fp4_indexer_keys_only};
}

PrecisionPolicy PrecisionPolicy::by_name(const std::string& name) {
  static constexpr std::string_view kNoHadamard = "-no-hadamard";
  const std::vector<PrecisionPolicy> named = all_named();
  std::string known;
  for (const PrecisionPolicy& p : named) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  const std::string unknown = "unknown precision policy '" + name + "': known policies are " + known + ", and <name>" +
                              std::string(kNoHadamard) +
                              " for a named policy that quantizes the indexer q/k with the rotation on";
  if (!name.ends_with(kNoHadamard)) throw std::invalid_argument(unknown);
  const std::string base_name = name.substr(0, name.size() - kNoHadamard.size());
  const auto base =
      std::find_if(named.begin(), named.end(), [&](const PrecisionPolicy& p) { return p.name == base_name; });
  if (base == named.end() || !base->indexer_qk || !base->indexer_hadamard) throw std::invalid_argument(unknown);
  PrecisionPolicy variant = renamed(*base, name);
  variant.indexer_hadamard = false;
  for (const PrecisionPolicy& p : named)
    if (p.differences_from(variant) == "none")
      throw std::invalid_argument("precision policy '" + name + "' is the named policy '" + p.name +
                                  "': use that name");
  return variant;
}

std::vector<std::pair<std::string, std::string>> PrecisionPolicy::switches() const {
  return {{"activations", to_string(activations)},
          {"fp32_tensors", to_string(fp32_tensors)},
          {"fp8_linears", linear_kind_name(fp8_linears)},
          {"kv_nope", format_name(kv_nope)},
          {"indexer_qk", indexer_qk_name(*this)},
          {"indexer_hadamard", on_off(indexer_hadamard)},
          {"indexer_scores", to_string(indexer_scores)},
          {"attn_probs", to_string(attn_probs)},
          {"attn_online_blocks", on_off(attn_online_blocks)}};
}

std::string PrecisionPolicy::describe() const {
  std::string text = name + ":";
  for (const auto& [key, value] : switches()) text += " " + key + "=" + value;
  if (!variant.is_deepseek()) text += " variant: " + variant.describe();
  return text;
}

std::string PrecisionPolicy::differences_from(const PrecisionPolicy& base) const {
  const auto mine = switches(), theirs = base.switches();
  std::string text;
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i].second != theirs[i].second)
      text += (text.empty() ? "" : ", ") + mine[i].first + "=" + mine[i].second + " (" + base.name + ": " +
              theirs[i].second + ")";
  return text.empty() ? "none" : text;
}

std::string NumericsVariant::describe() const {
  std::string out;
  const auto add = [&out](const std::string& item) { out += (out.empty() ? "" : " ") + item; };
  const auto shift = [](int v) { return (v > 0 ? "+" : "") + std::to_string(v); };
  if (rope_position_shift != 0) add("rope_position_shift=" + shift(rope_position_shift));
  if (rope_pairs == RopePairs::first_interleaved) add("rope_pairs=first_interleaved");
  if (rope_pairs == RopePairs::last_halves) add("rope_pairs=last_halves");
  if (ape_shift != 0) add("ape_shift=" + shift(ape_shift));
  if (causal_shift != 0) add("causal_shift=" + shift(causal_shift));
  switch (softmax_scale_dim) {
    case SoftmaxScaleDim::head_dim: break;
    case SoftmaxScaleDim::nope_dim: add("softmax_scale_dim=nope_dim"); break;
    case SoftmaxScaleDim::rope_dim: add("softmax_scale_dim=rope_dim"); break;
    case SoftmaxScaleDim::index_head_dim: add("softmax_scale_dim=index_head_dim"); break;
  }
  if (!attn_sink) add("attn_sink=off");
  return out;
}

PrecisionPolicy unrounded_output(PrecisionPolicy p) {
  p.activations = Storage::fp64;
  return p;
}

}  // namespace dsv4::ref
