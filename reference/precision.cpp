// The named precision policies: the mathematics, DeepSeek's code, and the alternatives the
// accuracy report compares.
#include "reference/precision.h"

#include <stdexcept>

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

  return {exact(),
          off,
          fp8_indexer,
          fp8_indexer_no_hadamard,
          fp4_indexer_no_hadamard,
          no_kv_quant,
          uniform("bf16", Storage::bf16),
          uniform("fp32", Storage::fp32),
          mxfp4_indexer,
          nvfp4_indexer};
}

PrecisionPolicy PrecisionPolicy::by_name(const std::string& name) {
  std::string known;
  for (const PrecisionPolicy& p : all_named()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw std::invalid_argument("unknown precision policy '" + name + "': known policies are " + known);
}

std::string PrecisionPolicy::describe() const {
  return name + ": activations=" + to_string(activations) + " fp32_tensors=" + to_string(fp32_tensors) +
         " fp8_linears=" + linear_kind_name(fp8_linears) + " kv_nope=" + format_name(kv_nope) +
         " indexer_qk=" + format_name(indexer_qk) + " indexer_hadamard=" + on_off(indexer_hadamard) +
         " indexer_scores=" + to_string(indexer_scores) + " attn_probs=" + to_string(attn_probs) +
         " attn_online_blocks=" + on_off(attn_online_blocks);
}

}  // namespace dsv4::ref
