#pragma once
// Replaying a capture (docs/capture-format.md "Replay"): every (layer, call, stage) the filters
// keep, in order (layers ascending, calls in order, stages in the registry's order), computed by
// a backend and compared with the captured dataset, one Record each:
//   PASS / FAIL  by the stage's comparator (reference/stage_registry.h) and its tolerance row;
//   MISSING      the capture has no such dataset (not a failure);
// Stages the layer's ratio does not have, and stages the --stage filter leaves out, get no record.
// Calls before the selected --call are still replayed (they carry the state), but not reported.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "verify/capture/capture.h"
#include "verify/replay/diagnose.h"
#include "verify/replay/layer_replay.h"
#include "verify/report/record.h"
#include "verify/tolerance/probability_flips.h"

namespace dsv4::verify {

struct ReplayOptions {
  ReplayMode mode = ReplayMode::stage_local;
  std::string precision;        // a named policy (reference/precision.h); "" = the capture's /config precision
  std::string backend = "cpu";  // "cpu" (the oracle) or "cuda"
  std::string tolerances;       // a tolerance file; "" = data/tolerances/ for the precision
  std::optional<int> layer;     // only this layer (its index L in the file)
  std::optional<int> call;      // only this call (in every selected layer)
  std::string stage_regex;      // only stages whose name matches (ECMAScript, searched); "" = all
  bool fail_fast = false;       // stop after the first FAIL record
  // Which stages get a diagnosis (verify/replay/diagnose.h): the first failing call of each
  // failing (layer, stage), or also of each passing stage whose values differ from the oracle's.
  DiagnoseScope diagnose = DiagnoseScope::failing;
  // The probability convention attn/core is judged by (verify/tolerance/probability_flips.h):
  // nullopt = the capture's `probs_convention` attribute, `any` where it has none.
  std::optional<ProbsConvention> probs_convention;
};

// Where a replay is, for a progress line: the call about to be replayed.
struct ReplayProgress {
  int layer = 0;
  int layer_number = 0;  // 1-based among the selected layers
  int layers = 0;
  int call = 0;
  int calls = 0;
};

// Throws std::invalid_argument for options the capture cannot satisfy (no such layer or call, an
// unknown precision, a bad regex), BackendUnavailable, CaptureError for a capture that cannot be
// replayed (a state neither captured nor derivable), and what ToleranceTable::load throws.
Report replay_capture(const Capture& capture, const ReplayOptions& options,
                      const std::function<void(const ReplayProgress&)>& progress = {});

}  // namespace dsv4::verify
