#pragma once
// The replay's stage table: every compared stage of a call, in the order of capture-format.md (the
// order of verify/capture/stage_names.h less `x` and `cache/...`), with how it is compared, what
// stage-local replay computes it from, and the Backend function that computes it. Records follow
// this order within a call; the CLI's --stage filter, the tolerance rows and the reports use these
// names.
#include <span>
#include <string_view>

namespace dsv4::verify {

enum class Comparison {
  dense,        // every element (verify/compare/dense.h)
  dense_state,  // a compressor state: only the rows DeepSeek's code relies on
                // (CompressorState::meaningful_rows), compare_dense_masked
  index_set,    // per row as sets, ties by the scores of `tie_scores` (verify/compare/index_set.h)
};

struct ReplayStage {
  std::string_view name;                // dataset under calls/<k>/ (stage_names.h)
  Comparison comparison;
  std::string_view stage_local_inputs;  // what stage-local replay computes it from (captured datasets)
  std::string_view backend_function;    // the Backend function (verify/replay/backend.h)
  std::string_view tie_scores;          // index_set: the stage whose values decide ties ("" = none)
};

// All 18 compared stages, in record order.
std::span<const ReplayStage> replay_stages();
// nullptr when `name` is not a compared stage.
const ReplayStage* find_replay_stage(std::string_view name);
std::string_view comparison_name(Comparison c);  // "dense", "dense (meaningful rows)", "index set"

}  // namespace dsv4::verify
