#pragma once
// Diagnosis of a failing stage (docs/math.md "Numerics variants", verify/replay/README.md): the
// stage replayed stage-locally, from the captured inputs and state of one call, by the oracle and by
// the oracle under every numerics variant that applies to it (ref::mutations_of: quantization
// rounding and floors, RoPE position and pairs, ape row, causal boundary, softmax scale, bf16
// probabilities, the sink, the output deviations), each compared bit for bit with the captured
// dataset. The variant that reproduces the captured values names the bug: "matches
// indexer/q:ties-toward-zero bitwise: 189 of 189 differing values explained".
//
// Cost: one stage-local replay of the call per variant (and of the calls before it when the call
// lacks some cache/ dataset), i.e. about (variants + 1) times the replay of that call.
#include "reference/precision.h"
#include "reference/stage_registry.h"
#include "verify/capture/capture.h"
#include "verify/report/record.h"

namespace dsv4::verify {

// Stage `stage` of call `call` of layer `layer` (the capture's indices). Throws std::invalid_argument
// when the stage is not compared, not in the layer's ratio or not in the capture, and what the
// replay throws.
Diagnosis diagnose_stage(const Capture& capture, int layer, int call, ref::Stage stage,
                         const ref::PrecisionPolicy& policy);

enum class DiagnoseScope {
  none,
  failing,    // the first failing record of each (layer, stage)
  differing,  // also the first record of each (layer, stage) that passes but is not bitwise the oracle's
};

// Attaches a diagnosis to the records `scope` names (the first of each (layer, stage)).
void diagnose_records(const Capture& capture, const ref::PrecisionPolicy& policy, DiagnoseScope scope, Report& report);

}  // namespace dsv4::verify
