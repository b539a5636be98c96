#pragma once
// The replay of one captured layer, call by call: every stage of a call computed by a Backend,
// for every sequence of the batch, from the inputs the mode says (docs/capture-format.md "Replay"):
//   stage-local  each stage from the captured inputs of that stage (a captured input that is
//                absent is replaced by the replay's own value, and the record says so); the state
//                before a call from its cache/ datasets, else from the replay of the earlier calls;
//   chained      every stage from x and the replay's own earlier results, state carried from call
//                to call (what ref::AttentionLayer::forward_batch computes over a ring cache).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "reference/layer.h"
#include "verify/capture/capture.h"
#include "verify/replay/backend.h"
#include "verify/replay/sequence_state.h"

namespace dsv4::verify {

enum class ReplayMode { stage_local, chained };
std::string to_string(ReplayMode mode);           // "stage-local", "chained"
ReplayMode replay_mode_from_string(const std::string& name);  // throws std::invalid_argument

// One stage's values from the replay of one call, one entry per sequence of the batch.
struct StageValue {
  std::vector<ref::Mat> dense;         // dense and state stages
  std::vector<ref::IndexMat> indices;  // index-set stages
  std::vector<ref::Mat> tie_scores;    // index-set stages: the scores the selection was made from
  int64_t tie_offset = 0;              // their column of index i is i - tie_offset
  std::vector<int> rows;               // state stages: the meaningful rows (the same for every sequence)
  std::vector<std::string> notes;      // inputs that did not come from where the mode says
  std::string computed_by;             // the backend's name
};
using CallValues = std::map<std::string, StageValue, std::less<>>;

class LayerReplay {
 public:
  // `capture` and `layer` must outlive this object. Throws std::invalid_argument when the oracle
  // refuses the configuration or the weights.
  LayerReplay(const Capture& capture, const LayerCapture& layer, const ref::PrecisionPolicy& policy,
              const Backend& backend, ReplayMode mode);

  // Replays layer.calls[k], k = 0, 1, ... in order (each call once), and advances the carried state.
  // -> the values of every stage the layer's ratio has. Throws CaptureError naming the missing
  // dataset when a state the call needs is neither captured nor left by the earlier calls (a call
  // that does not continue the previous one).
  CallValues replay_call(const CallCapture& call);

 private:
  const Capture& capture_;
  const LayerCapture& layer_;
  const Backend& backend_;
  ReplayMode mode_;
  ref::AttentionLayer oracle_layer_;
  std::vector<SequenceState> carried_;  // one per sequence, after the last replayed call
};

}  // namespace dsv4::verify
