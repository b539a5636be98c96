// The pre-quantization datasets and the final rounding of each quantized stage.
#include "reference/pre_quant.h"

#include "reference/numerics/storage.h"
#include "reference/stages/indexer.h"
#include "reference/stages/projections.h"

namespace dsv4::ref {
namespace {

// kv and compressor/entries: FP8 on the nope dims (act_quant inplace), the rope dims kept.
void quantize_nope(Mat& values, const ModelConfig& cfg, const PrecisionPolicy& p) {
  quantize_kv_nope(values, cfg.rope_head_dim, p);
  round_in_place(p.activations, values);
}

// indexer/q and indexer/compressor/entries: FP4 over every dim (fp4_act_quant inplace).
void quantize_all_dims(Mat& values, const ModelConfig&, const PrecisionPolicy& p) {
  quantize_indexer_rows(values, p);
  round_in_place(p.activations, values);
}

PrecisionPolicy without_kv_quantization(PrecisionPolicy p) {
  p.kv_nope.reset();
  return p;
}

PrecisionPolicy without_indexer_quantization(PrecisionPolicy p) {
  p.indexer_qk.reset();
  return p;
}

const PreQuantDef kPreQuant[] = {
    {Stage::kv, "pre_quant/kv", quantize_nope, without_kv_quantization},
    {Stage::compressor_entries, "pre_quant/compressor/entries", quantize_nope, without_kv_quantization},
    {Stage::indexer_q, "pre_quant/indexer/q", quantize_all_dims, without_indexer_quantization},
    {Stage::indexer_compressor_entries, "pre_quant/indexer/compressor/entries", quantize_all_dims,
     without_indexer_quantization},
};

}  // namespace

std::span<const PreQuantDef> pre_quant_datasets() { return kPreQuant; }

const PreQuantDef* find_pre_quant(std::string_view name) {
  for (const PreQuantDef& d : kPreQuant)
    if (d.name == name) return &d;
  return nullptr;
}

const PreQuantDef* pre_quant_of(Stage stage) {
  for (const PreQuantDef& d : kPreQuant)
    if (d.stage == stage) return &d;
  return nullptr;
}

bool is_pre_quant_group(std::string_view path) {
  for (const PreQuantDef& d : kPreQuant)
    if (d.name.size() > path.size() && d.name.starts_with(path) && d.name[path.size()] == '/') return true;
  return false;
}

}  // namespace dsv4::ref
