// The captures of DeepSeek's own code (docs/deepseek-capture.md: official model.py with its TileLang
// kernels on an H200), pinned stage by stage: the stage-local replay equals them bit for bit where
// the GPU's arithmetic is knowable; elsewhere (accumulation orders inside the GPU's GEMMs, the
// attention kernel's dot products and sums) it differs in at most the number of elements measured
// when the capture was added, each by at most one unit in the last place of the stored format
// (bf16 for activations, fp32 for compressor states) at the scale of the record's RMS (a value
// near zero that cancels in a sum can be many of its own ulps off while the error is one ulp of
// the terms). A change of the oracle that moves any of these fails here with the stage and count.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "reference/stage_registry.h"
#include "verify/capture/capture.h"
#include "verify/capture/reader.h"
#include "verify/replay/backend.h"
#include "verify/replay/layer_replay.h"
#include "verify/replay/replay.h"

using namespace dsv4;
using namespace dsv4::verify;

namespace {

// One unit in the last place of storage s at the magnitude of `scale` (a power of two).
double ulp_at(double scale, ref::Storage s) {
  int e = 0;
  std::frexp(scale, &e);  // scale = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 1 - (s == ref::Storage::bf16 ? 7 : 23));
}

struct Pin {
  int64_t max_differing = 0;  // elements per (layer, call) record not bitwise equal
};

// The largest difference allowed, in units of the last place at the record's RMS: bf16 stages 2
// (the GPU's accumulation order can move the fp32 value before the bf16 rounding by up to one bf16
// ulp, and the rounding adds one); fp32 compressor states 32 (wkv(x) and wgate(x) are fp32 sums of
// dim terms in an order that is not knowable: about sqrt(dim) ulps, dim <= 384 here).
double allowed_ulps(const ref::StageDef& s, const ref::PrecisionPolicy& p) {
  return s.storage(p) == ref::Storage::fp32 ? 32.0 : 2.0;
}

// Per stage, over every record of the capture: the most elements of one record that differ, and
// the largest difference in units of the last place at the record's RMS.
struct Measured {
  int64_t max_differing = 0;
  double max_ulps = 0;
};

std::map<std::string, Measured> measure(const std::string& path) {
  const Capture capture = read_capture(path);
  const ref::PrecisionPolicy policy = ref::PrecisionPolicy::by_name(capture.precision);
  std::map<std::string, Measured> out;
  for (const auto& [index, layer] : capture.layers) {
    LayerReplay replay(capture, layer, policy, ref::oracle_stages(), ReplayMode::stage_local);
    for (const CallCapture& call : layer.calls) {
      const CallValues values = replay.replay_call(call).values;
      for (const auto& [name, value] : values) {
        const ref::StageDef& stage = *ref::find_stage(name);
        Measured& m = out[name];
        if (!call.has(name)) continue;
        const Tensor& captured = call.stage(name);
        if (stage.is_index()) {
          // Index sets: the selected entries, order aside, must be the same.
          int64_t differing = 0;
          size_t at = 0;
          for (const ref::IndexMat& rows : value.indices)
            for (ref::Index r = 0; r < rows.rows(); ++r) {
              std::multiset<int64_t> want(rows.row(r).data(), rows.row(r).data() + rows.cols());
              std::multiset<int64_t> got(captured.values.begin() + at, captured.values.begin() + at + rows.cols());
              differing += want != got;
              at += rows.cols();
            }
          m.max_differing = std::max(m.max_differing, differing);
          continue;
        }
        const ref::Storage storage = stage.storage(policy);
        double sum_squares = 0;
        int64_t finite = 0;
        for (double v : captured.values)
          if (std::isfinite(v)) sum_squares += v * v, ++finite;
        const double ulp = ulp_at(std::sqrt(sum_squares / std::max<int64_t>(finite, 1)), storage);
        int64_t differing = 0;
        size_t at = 0;
        for (const ref::Mat& rows : value.dense)
          for (ref::Index i = 0; i < rows.size(); ++i, ++at) {
            const double want = rows.data()[i], got = captured.values[at];
            if (std::bit_cast<uint64_t>(want) == std::bit_cast<uint64_t>(got)) continue;
            if (std::isinf(want) && want == got) continue;
            if (stage.comparison == ref::Comparison::dense_state) {
              // State rows the next call does not read may hold anything; compare the others.
              const int64_t row = static_cast<int64_t>(at / static_cast<size_t>(rows.cols())) % rows.rows();
              if (std::find(value.rows.begin(), value.rows.end(), row) == value.rows.end()) continue;
            }
            ++differing;
            m.max_ulps = std::max(m.max_ulps, std::abs(want - got) / ulp);
          }
        m.max_differing = std::max(m.max_differing, differing);
      }
    }
  }
  return out;
}

void check_pins(const std::string& file, const std::map<std::string, Pin>& pins) {
  const std::map<std::string, Measured> measured = measure(std::string(DSV4_CAPTURES_DIR) + "/" + file);
  for (const auto& [stage, m] : measured) {
    INFO(file, ": ", stage, " differs in ", m.max_differing, " elements of a record, by up to ", m.max_ulps,
         " units in the last place");
    const auto pin = pins.find(stage);
    REQUIRE_MESSAGE(pin != pins.end(), "no pin for ", stage);
    CHECK(m.max_differing <= pin->second.max_differing);
    const ref::StageDef& s = *ref::find_stage(stage);
    if (!s.is_index()) CHECK(m.max_ulps <= allowed_ulps(s, ref::PrecisionPolicy::official()));
  }
  CHECK(measured.size() == pins.size());
}

}  // namespace

TEST_CASE("the tiny DeepSeek capture (p37, 5 decodes) is pinned stage by stage") {
  check_pins("deepseek-official-tiny-p37-d5.h5", {{"q_latent", {1}},
                                                  {"q", {1}},
                                                  {"kv", {0}},
                                                  {"compressor/entries", {1}},
                                                  {"compressor/state_kv", {5801}},
                                                  {"compressor/state_score", {4665}},
                                                  {"indexer/q", {0}},
                                                  {"indexer/weights", {0}},
                                                  {"indexer/compressor/entries", {0}},
                                                  {"indexer/compressor/state_kv", {1568}},
                                                  {"indexer/compressor/state_score", {1336}},
                                                  {"indexer/scores", {0}},
                                                  {"indexer/topk", {0}},
                                                  {"topk_idxs", {0}},
                                                  {"attn/core", {2}},
                                                  {"attn/out_heads", {0}},
                                                  {"attn/wo_a", {2}},
                                                  {"out", {0}}});
}

TEST_CASE("the alias-free DeepSeek capture (p260, 3 decodes, window 128, top-24) is pinned stage by stage") {
  check_pins("deepseek-official-af-p260-d3.h5", {{"q_latent", {1}},
                                                 {"q", {2}},
                                                 {"kv", {0}},
                                                 {"compressor/entries", {1}},
                                                 {"compressor/state_kv", {1001}},
                                                 {"compressor/state_score", {891}},
                                                 {"indexer/q", {0}},
                                                 {"indexer/weights", {0}},
                                                 {"indexer/compressor/entries", {0}},
                                                 {"indexer/compressor/state_kv", {655}},
                                                 {"indexer/compressor/state_score", {618}},
                                                 {"indexer/scores", {0}},
                                                 {"indexer/topk", {0}},
                                                 {"topk_idxs", {0}},
                                                 {"attn/core", {270}},
                                                 {"attn/out_heads", {2}},
                                                 {"attn/wo_a", {49}},
                                                 {"out", {0}}});
}

// attn/core judged by the per-element bound of DeepSeek's probability convention, which the
// kernel.py these captures come from follows (docs/tolerances.md "Probability flips"): every record
// passes in both modes, and the farthest rounding boundary a flip needed stays within the share of
// its bound measured when the bound was added (tiny 1.1e-3, alias-free 0.783), so a change of the
// bound or of the oracle that narrows the margin fails here.
TEST_CASE("the DeepSeek captures' attn/core passes the per-element bound of their probability convention") {
  for (const auto& [file, max_reach] :
       {std::pair{"deepseek-official-tiny-p37-d5.h5", 0.002}, std::pair{"deepseek-official-af-p260-d3.h5", 0.8}}) {
    const Capture capture = read_capture(std::string(DSV4_CAPTURES_DIR) + "/" + file);
    for (ReplayMode mode : {ReplayMode::stage_local, ReplayMode::chained}) {
      INFO(file, " ", to_string(mode));
      ReplayOptions o;
      o.mode = mode;
      o.stage_regex = "^attn/core$";
      o.diagnose = DiagnoseScope::none;
      o.probs_convention = ProbsConvention::deepseek;
      const Report r = replay_capture(capture, o);
      CHECK(r.counts().failed == 0);
      double reach = 0;
      int64_t flips = 0;
      for (const Record& rec : r.records) {
        const auto* d = std::get_if<DenseMetrics>(&rec.verdict_metrics());
        REQUIRE((d && d->rounding));
        reach = std::max(reach, d->rounding->max_reach);
        flips += d->rounding->flips + d->rounding->multi_step;
        if (mode == ReplayMode::stage_local) CHECK(rec.note.find("per-element bound") != std::string::npos);
      }
      INFO(flips, " flips, the farthest needing ", reach, " of its bound");
      CHECK(flips > 0);
      CHECK(reach <= max_reach);
    }
  }
}
