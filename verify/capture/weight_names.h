#pragma once
// The weight datasets of a layer (layers/<L>/weights/... in capture-format.md), defined once:
// names, which layers have them, shapes, and the linear kind of projection weights (attr `linear`).
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "reference/config.h"
#include "reference/stage_registry.h"
#include "reference/weights.h"

namespace dsv4::verify {

struct WeightName {
  std::string_view name;  // dataset path under weights/
  ref::StageScope scope;
  std::string_view linear;     // "fp8" | "bf16" | "fp32" for projections (DeepSeek's numerics), "" otherwise
  std::string_view shape_doc;  // "[H*d,q_lora_rank]"
  std::vector<int64_t> (*shape)(const ref::ModelConfig& cfg, int ratio);  // 1-D: a ref::Vec
};

std::span<const WeightName> weight_names();            // all 18
const WeightName* find_weight(std::string_view name);  // nullptr when not a weight
bool is_weight_group(std::string_view path);           // "compressor", "indexer", "indexer/compressor"

// Calls f(member) with the ref::Mat or ref::Vec of `w` (const when w is) that holds weight `name`.
template <typename Weights, typename F>
void visit_weight(Weights& w, std::string_view name, F&& f) {
  if (name == "wq_a") return f(w.wq_a);
  if (name == "q_norm") return f(w.q_norm);
  if (name == "wq_b") return f(w.wq_b);
  if (name == "wkv") return f(w.wkv);
  if (name == "kv_norm") return f(w.kv_norm);
  if (name == "attn_sink") return f(w.attn_sink);
  if (name == "wo_a") return f(w.wo_a);
  if (name == "wo_b") return f(w.wo_b);
  if (name == "compressor/wkv") return f(w.compressor.wkv);
  if (name == "compressor/wgate") return f(w.compressor.wgate);
  if (name == "compressor/ape") return f(w.compressor.ape);
  if (name == "compressor/norm") return f(w.compressor.norm);
  if (name == "indexer/wq_b") return f(w.indexer.wq_b);
  if (name == "indexer/weights_proj") return f(w.indexer.weights_proj);
  if (name == "indexer/compressor/wkv") return f(w.indexer.compressor.wkv);
  if (name == "indexer/compressor/wgate") return f(w.indexer.compressor.wgate);
  if (name == "indexer/compressor/ape") return f(w.indexer.compressor.ape);
  if (name == "indexer/compressor/norm") return f(w.indexer.compressor.norm);
  throw std::out_of_range("visit_weight: no weight named '" + std::string(name) + "'");
}

}  // namespace dsv4::verify
