#pragma once
// The stage datasets of one call (calls/<k>/... in capture-format.md), defined once: their names,
// which layers have them, what their values may be, and their shapes. The reader checks every
// dataset against this table; the writer, replay, comparators and reports use the same names.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verify/capture/call_geometry.h"

namespace dsv4::verify {

// Which layers have a stage (or a weight): every layer, compressed layers (ratio 4 or 128), or
// CSA layers (ratio 4, which have the indexer).
enum class StageScope { all_layers, compressed, csa };
bool in_scope(StageScope scope, int ratio);
std::string_view scope_text(StageScope scope);  // "every layer", "compress_ratio 4 or 128", ...

enum class StageValues {
  finite,               // every value finite
  finite_or_minus_inf,  // -inf allowed (masked scores, empty state slots), never NaN or +inf
  index,                // integers: -1 (unused slot) or a row of the call's kv matrix
};

struct StageName {
  std::string_view name;       // dataset path under calls/<k>/
  StageScope scope;
  StageValues values;
  std::string_view shape_doc;  // "[b,s,H,d]"
  std::vector<int64_t> (*shape)(const CallGeometry& g);

  bool is_index() const { return values == StageValues::index; }
  // cache/...: state before the call (optional input of stage-local replay), not a result.
  bool is_cache() const { return name.starts_with("cache/"); }
};

// All 26, in the order of capture-format.md (x first, then the stages in computation order, then
// the cache datasets).
std::span<const StageName> stage_names();
// nullptr when `name` is not a stage.
const StageName* find_stage(std::string_view name);
// True when `path` (e.g. "indexer" or "indexer/compressor") is a group holding stage datasets.
bool is_stage_group(std::string_view path);

}  // namespace dsv4::verify
