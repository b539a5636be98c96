#pragma once
// The optional pre-quantization datasets of a call (docs/capture-format.md "Pre-quantization
// values"): for each stage whose last step is a block quantization (FP8 on the nope dims of kv and
// of the main compressor's entries, FP4 on indexer/q and on the indexer compressor's entries), the
// value just before that rounding, so that a verifier can check the quantizer bit for bit from it.
// This table is their one definition (the capture reader, synth, the DeepSeek adapter's list and
// the replay read it); a dataset has the shape, layers, value rule and storage of its stage.
#include <span>
#include <string_view>

#include "reference/config.h"
#include "reference/precision.h"
#include "reference/stage_registry.h"
#include "reference/tensor.h"

namespace dsv4::ref {

struct PreQuantDef {
  Stage stage;            // the quantized stage (its registry row gives shape, scope, storage)
  std::string_view name;  // dataset path under calls/<k>/: "pre_quant/" + the stage's name
  // The stage's final rounding, in place: the pre-quantization value of one sequence ([rows, cols]
  // of the stage) becomes the stage's value under policy p (the oracle's own code for that step).
  void (*quantize)(Mat& values, const ModelConfig& cfg, const PrecisionPolicy& p);
  // The policy under which the stage's oracle function stops just before that rounding.
  PrecisionPolicy (*without_quantization)(PrecisionPolicy p);
};

// The four rows: pre_quant/kv, pre_quant/compressor/entries, pre_quant/indexer/q,
// pre_quant/indexer/compressor/entries.
std::span<const PreQuantDef> pre_quant_datasets();
const PreQuantDef* find_pre_quant(std::string_view name);  // nullptr when `name` is not one
const PreQuantDef* pre_quant_of(Stage stage);              // nullptr when the stage has none
// True when `path` is a group holding pre-quantization datasets ("pre_quant", "pre_quant/indexer", ...).
bool is_pre_quant_group(std::string_view path);

}  // namespace dsv4::ref
