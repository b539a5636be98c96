#include "verify/precision/report_figures.h"

#include <stdexcept>

namespace dsv4::verify {

const StageFigures& LayerFigures::stage(const std::string& name) const {
  for (const StageFigures& s : stages)
    if (s.stage == name) return s;
  throw std::out_of_range("layer " + std::to_string(layer) + " (ratio " + std::to_string(compress_ratio) +
                          ") has no stage " + name + " in the precision report");
}

StageFigures figures_of(const StageError& s) {
  const ErrorStats& e = s.error;
  StageFigures f;
  f.stage = s.stage;
  f.note = s.note;
  f.n = e.n();
  f.n_finite = e.n_finite();
  f.nonfinite_matched = e.nonfinite_matched();
  f.nonfinite_mismatches = e.nonfinite_mismatches();
  f.nmse = e.nmse();
  f.cos_diff = e.cos_diff();
  f.max_rel = e.max_rel();
  f.max_abs = e.max_abs();
  f.ref_rms = e.ref_rms();
  f.histogram = e.histogram();
  return f;
}

LayerFigures figures_of(const LayerResult& l) {
  LayerFigures f;
  f.layer = l.layer;
  f.compress_ratio = l.compress_ratio;
  for (const StageError& s : l.stages) f.stages.push_back(figures_of(s));
  if (l.recall)
    f.recall = RecallFigures{l.recall->summary(), l.recall->worst_row(), l.recall->buckets(), l.recall->histogram()};
  for (const auto& [key, b] : l.output_by_position)
    f.output_by_position.push_back({b.first_position, b.last_position, b.attention.nmse(), b.layer.nmse()});
  return f;
}

std::vector<PolicyFigures> figures_of(const PrecisionReport& report, uint64_t seed) {
  std::vector<PolicyFigures> out;
  for (const PolicyResult& p : report.policies) {
    PolicyFigures f;
    f.policy = p.policy;
    f.seed = seed;
    f.time = p.time;
    f.reference_time = report.reference_time;
    for (const LayerResult& l : p.layers) f.layers.push_back(figures_of(l));
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace dsv4::verify
