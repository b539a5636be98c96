#include "verify/replay/replay.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <regex>
#include <stdexcept>

#include "reference/call_geometry.h"
#include "reference/pre_quant.h"
#include "reference/precision.h"
#include "reference/stage_registry.h"
#include "verify/compare/dense.h"
#include "verify/compare/index_set.h"
#include "verify/compare/rounded.h"
#include "verify/compare/stage_rounding.h"
#include "verify/replay/backend.h"
#include "verify/replay/diagnose.h"
#include "verify/tolerance/tolerance_table.h"

namespace dsv4::verify {

namespace {

// The replay's values of a stage, flattened in the capture's order [b, rows, cols].
std::vector<double> flatten(const std::vector<ref::Mat>& per_sequence) {
  std::vector<double> out;
  for (const ref::Mat& m : per_sequence) out.insert(out.end(), m.data(), m.data() + m.size());
  return out;
}

std::vector<int64_t> flatten(const std::vector<ref::IndexMat>& per_sequence) {
  std::vector<int64_t> out;
  for (const ref::IndexMat& m : per_sequence) out.insert(out.end(), m.data(), m.data() + m.size());
  return out;
}

void check_size(const Record& r, size_t replayed, int64_t captured) {
  if (static_cast<int64_t>(replayed) != captured)
    throw std::logic_error(fmt::format("replay: layer {} call {} {}: the replay gave {} values for the {} of shape {}",
                                       r.layer, r.call, r.stage, replayed, captured, format_shape(r.shape)));
}

// The captured quantizer checked bit for bit from the captured value before it (docs/capture-format.md
// "Pre-quantization values"): when the call holds pre_quant/<stage> and the stage's final rounding
// has a grid, the captured stage must be the format's rounding of it (check_quantizer). A
// difference fails the record (gate "quantizer") whatever the comparison with the oracle says:
// a quantizer that rounds ties toward zero, truncates, floors the scale or skips the rounding
// moves values by less than a step, which upstream error allows, but is wrong on its own input.
void check_captured_quantizer(Record& r, const CallCapture& call, const ref::StageDef& stage,
                              const ref::PrecisionPolicy& policy, const ref::ModelConfig& config) {
  const ref::PreQuantDef* def = ref::pre_quant_of(stage.id);
  if (def == nullptr || r.status == Status::missing || !call.has(std::string(def->name))) return;
  const std::optional<RoundingFormat> format = final_rounding(stage.name, policy, config);
  if (!format) return;
  const Tensor& pre = call.stage(std::string(def->name));
  const Tensor& captured = call.stage(r.stage);
  // (The reader checks that the shapes are the stage's.)
  const DenseMetrics q =
      check_quantizer(pre.values, captured.values, captured.shape, *format, NonFiniteRule::of(stage.values));
  if (q.status == Status::vacuous) return;  // no value to check (a call that completes no entry)
  std::string note;
  if (q.status == Status::pass) {
    note = fmt::format("quantizer bitwise from {} ({} values)", def->name, q.n);
  } else {
    r.status = Status::fail;
    if (auto* d = std::get_if<DenseMetrics>(&r.metrics)) d->failed_gates.push_back("quantizer");
    const int64_t differing = q.rounding ? q.rounding->differing : q.bitwise_mismatches;
    note = fmt::format("quantizer FAILS on its own input {}: {} of {} values are not {} of it", def->name, differing,
                       q.n, format->name());
    if (q.rounding && q.rounding->tie_flips > 0)
      note += fmt::format(" ({} ties rounded the other way)", q.rounding->tie_flips);
    if (q.rounding && q.rounding->block_scales_unexplained > 0)
      note += fmt::format(" ({} block scales wrong)", q.rounding->block_scales_unexplained);
  }
  r.note = r.note.empty() ? note : r.note + "; " + note;
}

// attn/core's pre-rounding bound under the replay's probability convention: per element when the
// producer follows DeepSeek's and the pass derived it; else empty (the tolerance row's bound). The
// record says which, and what the per-element bound rests on.
std::vector<double> probability_bound(const StageValue& value, ProbsConvention probs, std::vector<std::string>& notes) {
  if (value.probability_bound.empty()) return {};
  if (probs == ProbsConvention::any) {
    notes.push_back("probabilities by any convention: the row's pre-rounding bound (see --probs-convention)");
    return {};
  }
  const ProbabilityFlipCounts& c = value.probability_counts;
  notes.push_back(fmt::format(
      "probabilities by DeepSeek's convention: per-element bound, {} of {} keys within reach of a bf16 boundary, "
      "in {} of {} heads",
      c.eligible_keys, c.keys, c.heads_with_eligible, c.heads));
  return flatten(value.probability_bound);
}

Record compare_stage(int layer, const CallCapture& call, const ref::CallGeometry& geometry, const ref::StageDef& stage,
                     const StageValue& value, const ToleranceTable& table, const ref::PrecisionPolicy& policy,
                     ProbsConvention probs) {
  Record r;
  r.layer = layer;
  r.call = call.index;
  r.stage = std::string(stage.name);
  if (!call.has(r.stage)) {
    r.status = Status::missing;
    r.shape = stage.shape(geometry);
    r.note = "not in the capture";
    return r;
  }
  const Tensor& captured = call.stage(r.stage);
  r.shape = captured.shape;
  r.dtype = captured.dtype;
  r.tolerance = table.at(stage.name);
  const NonFiniteRule nonfinite = NonFiniteRule::of(stage.values);
  std::vector<std::string> notes = value.notes;
  if (value.computed_by != "oracle") notes.push_back("computed by " + value.computed_by);
  const std::vector<double> element_bound = probability_bound(value, probs, notes);
  r.note = fmt::format("{}", fmt::join(notes, "; "));

  switch (stage.comparison) {
    case ref::Comparison::dense: {
      const std::vector<double> replayed = flatten(value.dense);
      check_size(r, replayed.size(), captured.numel());
      const std::vector<double> pre_rounding = flatten(value.pre_rounding);
      const std::optional<RoundingFormat> format = pre_rounding.empty() || !r.tolerance->pre_rounding
                                                       ? std::nullopt
                                                       : final_rounding(stage.name, policy, *geometry.cfg);
      // A rounded stage with the oracle's value before its rounding: judged by what rounding allows
      // (docs/tolerances.md F5); otherwise by the dense gates alone.
      const DenseMetrics m =
          format ? compare_rounded(replayed, captured.values, captured.shape,
                                   RoundedReference{pre_rounding, *format, element_bound}, *r.tolerance, nonfinite)
                 : compare_dense(replayed, captured.values, captured.shape, *r.tolerance, nonfinite);
      r.status = m.status;
      r.metrics = m;
      break;
    }
    case ref::Comparison::dense_state: {
      const std::vector<double> replayed = flatten(value.dense);
      check_size(r, replayed.size(), captured.numel());
      // Rows of [b, coff*r, coff*d]: sequence b's meaningful rows are kept.
      const int64_t rows_per_sequence = captured.shape.at(1);
      std::vector<uint8_t> mask(static_cast<size_t>(captured.shape.at(0) * rows_per_sequence), 0);
      for (int64_t b = 0; b < captured.shape.at(0); ++b)
        for (int row : value.rows) mask[static_cast<size_t>(b * rows_per_sequence + row)] = 1;
      const DenseMetrics m =
          compare_dense_masked(replayed, captured.values, captured.shape, mask, *r.tolerance, nonfinite);
      r.status = m.status;
      r.metrics = m;
      const size_t kept = value.rows.size();
      if (kept < static_cast<size_t>(rows_per_sequence))
        r.note += fmt::format("{}{} of {} rows per sequence compared (the others are don't-care slots)",
                              r.note.empty() ? "" : "; ", kept, rows_per_sequence);
      break;
    }
    case ref::Comparison::index_set: {
      const std::vector<int64_t> replayed = flatten(value.indices);
      check_size(r, replayed.size(), captured.numel());
      const std::vector<int64_t> got(captured.values.begin(), captured.values.end());
      const int64_t rows = captured.shape.at(0) * captured.shape.at(1);
      const int64_t ref_cols = value.indices.empty() ? 0 : value.indices.front().cols();
      const std::vector<double> scores = flatten(value.tie_scores);
      const int64_t score_cols = value.tie_scores.empty() ? 0 : value.tie_scores.front().cols();
      const IndexSetMetrics m =
          compare_index_sets(IndexRows{replayed, rows, ref_cols}, IndexRows{got, rows, captured.shape.at(2)},
                             scores.empty() ? ScoreRows{} : ScoreRows{scores, rows, score_cols},
                             tie_window(*r.tolerance), value.tie_offset);
      r.status = m.status;
      r.metrics = m;
      break;
    }
    case ref::Comparison::none:
      throw std::logic_error("replay: stage " + r.stage + " is an input, not a compared stage");
  }
  check_captured_quantizer(r, call, stage, policy, *geometry.cfg);
  return r;
}

// Chained mode: the record keeps the metrics against the oracle's chained values (how far the
// engine is from the oracle's own end-to-end computation) and takes its verdict from the stage's
// own error: the comparison against the stage recomputed from the captured inputs. The chained
// difference is at most the stage's own error plus the propagated one (the difference between
// the stage computed from the replay's inputs and from the captured ones, measured exactly by
// computing both); docs/tolerances.md "Chained replay".
Record chained_record(Record chained, const Record& own) {
  if (chained.status == Status::missing) return chained;
  chained.status = own.status;
  chained.verdict = own.metrics;
  std::string verdict = fmt::format(
      "verdict on the stage's own error (against the stage recomputed from the captured "
      "inputs): {}",
      to_string(own.status));
  if (const auto* d = std::get_if<DenseMetrics>(&own.metrics))
    verdict += fmt::format(", max_abs {:.3e}, cos_diff {:.3e}", d->max_abs, d->cos_diff);
  else if (const auto* i = std::get_if<IndexSetMetrics>(&own.metrics))
    verdict += fmt::format(", {} of {} rows failed", i->rows_failed, i->rows);
  chained.note = chained.note.empty() ? verdict : chained.note + "; " + verdict;
  return chained;
}

std::string list_layers(const Capture& c) {
  std::vector<int> layers;
  for (const auto& [index, layer] : c.layers) layers.push_back(index);
  return fmt::format("{}", fmt::join(layers, ", "));
}

}  // namespace

Report replay_capture(const Capture& capture, const ReplayOptions& options,
                      const std::function<void(const ReplayProgress&)>& progress) {
  const std::string precision = options.precision.empty() ? capture.precision : options.precision;
  const ref::PrecisionPolicy policy = ref::PrecisionPolicy::by_name(precision);
  const ToleranceTable table =
      options.tolerances.empty() ? ToleranceTable::for_precision(precision) : ToleranceTable::load(options.tolerances);
  std::optional<std::regex> stage_filter;
  if (!options.stage_regex.empty()) {
    try {
      stage_filter.emplace(options.stage_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw std::invalid_argument(fmt::format("--stage '{}': expected a regular expression, found an error: {}",
                                              options.stage_regex, e.what()));
    }
  }
  std::vector<const LayerCapture*> layers;
  for (const auto& [index, layer] : capture.layers)
    if (!options.layer || *options.layer == index) layers.push_back(&layer);
  if (layers.empty())
    throw std::invalid_argument(
        fmt::format("--layer {}: expected one of the capture's layers ({})", *options.layer, list_layers(capture)));
  if (options.call) {
    bool found = false;
    for (const LayerCapture* l : layers) found = found || *options.call < static_cast<int>(l->calls.size());
    if (*options.call < 0 || !found)
      throw std::invalid_argument(fmt::format("--call {}: expected a call the selected layers have (0 .. {})",
                                              *options.call, layers.front()->calls.size() - 1));
  }
  const std::unique_ptr<ref::StageProvider> backend = make_backend(options.backend, precision);
  const ProbsConvention probs = options.probs_convention.value_or(
      capture.probs_convention.empty() ? ProbsConvention::any : probs_convention_from_string(capture.probs_convention));

  Report report;
  report.file = capture.path;
  report.mode = to_string(options.mode);
  report.precision = precision;
  report.backend = backend->name();
  report.tolerances = table.source();

  for (size_t n = 0; n < layers.size(); ++n) {
    const LayerCapture& layer = *layers[n];
    LayerReplay replay(capture, layer, policy, *backend, options.mode);
    for (const CallCapture& call : layer.calls) {
      if (options.call && call.index > *options.call) break;
      if (progress)
        progress({layer.index, static_cast<int>(n) + 1, static_cast<int>(layers.size()), call.index,
                  static_cast<int>(layer.calls.size())});
      const ReplayedCall replayed = replay.replay_call(call);
      if (options.call && call.index != *options.call) continue;
      const ref::CallGeometry geometry{&capture.config, layer.compress_ratio, call.batch, call.seqlen, call.start_pos};
      for (const ref::StageDef& stage : ref::stages()) {
        if (!stage.is_compared() || !ref::in_scope(stage.scope, layer.compress_ratio)) continue;
        if (stage_filter && !std::regex_search(stage.name.begin(), stage.name.end(), *stage_filter)) continue;
        const std::string name(stage.name);
        Record r = compare_stage(layer.index, call, geometry, stage, replayed.values.at(name), table, policy, probs);
        if (options.mode == ReplayMode::chained)
          r = chained_record(std::move(r), compare_stage(layer.index, call, geometry, stage,
                                                         replayed.from_captured_inputs.at(name), table, policy, probs));
        report.records.push_back(std::move(r));
        if (options.fail_fast && report.records.back().status == Status::fail) {
          diagnose_records(capture, policy, options.diagnose, report);
          return report;
        }
      }
    }
  }
  diagnose_records(capture, policy, options.diagnose, report);
  return report;
}

}  // namespace dsv4::verify
