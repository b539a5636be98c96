// verify/ in Python: tolerance tables, the comparators and their records (the lines dsv4-verify
// prints). No HDF5 here: capture files are bind_capture.cpp.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <numeric>
#include <stdexcept>

#include "reference/stage_registry.h"
#include "verify/compare/dense.h"
#include "verify/compare/index_set.h"
#include "verify/python/src/arrays.h"
#include "verify/report/console.h"
#include "verify/report/record.h"
#include "verify/report/text_cells.h"
#include "verify/tolerance/tolerance_table.h"

namespace dsv4::python {

using namespace nb::literals;
namespace v = verify;

namespace {

std::vector<int64_t> flat_int(const InAny& a) {
  std::vector<int64_t> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a.data()[i];
    if (x != std::floor(x))
      throw std::invalid_argument("index array holds a non-integer " + std::to_string(x) + " at flat position " +
                                  std::to_string(i));
    out[i] = static_cast<int64_t>(x);
  }
  return out;
}

int64_t rows_of(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end() - (shape.empty() ? 0 : 1), int64_t{1}, std::multiplies<>());
}

v::Record compare_stage(const std::string& stage, InAny reference, InAny tested, const v::ToleranceTable& table,
                        std::optional<In2> scores, int64_t offset, std::optional<InBytes> row_mask, int layer, int call,
                        const std::string& dtype) {
  const ref::StageDef* s = ref::find_stage(stage);
  if (s == nullptr || !s->is_compared()) {
    std::string known;
    for (const ref::StageDef& n : ref::stages())
      if (n.is_compared()) known += (known.empty() ? "" : ", ") + std::string(n.name);
    throw std::invalid_argument("compare: '" + stage + "' is not a compared stage (stages: " + known + ")");
  }
  v::Record r;
  r.layer = layer;
  r.call = call;
  r.stage = stage;
  r.shape = shape_of(tested);
  r.dtype = dtype;
  r.tolerance = table.at(stage);
  if (s->comparison == ref::Comparison::index_set) {
    const std::vector<int64_t> ref_shape = shape_of(reference);
    if (ref_shape.empty() || r.shape.empty())
      throw std::invalid_argument("compare: index stages need arrays of rank >= 1");
    const std::vector<int64_t> ref_values = flat_int(reference), got_values = flat_int(tested);
    const int64_t rows = rows_of(ref_shape);
    std::vector<double> score_values;
    v::ScoreRows score_rows{};
    if (scores) {
      score_values.assign(scores->data(), scores->data() + scores->size());
      score_rows =
          v::ScoreRows{score_values, static_cast<int64_t>(scores->shape(0)), static_cast<int64_t>(scores->shape(1))};
    }
    const v::IndexSetMetrics m = v::compare_index_sets(v::IndexRows{ref_values, rows, ref_shape.back()},
                                                       v::IndexRows{got_values, rows_of(r.shape), r.shape.back()},
                                                       score_rows, v::tie_window(*r.tolerance), offset);
    r.status = m.status;
    r.metrics = m;
  } else {
    if (shape_of(reference) != r.shape)
      throw std::invalid_argument("compare: '" + stage + "' reference shape " + v::format_shape(shape_of(reference)) +
                                  " differs from the tested " + v::format_shape(r.shape));
    // A compressor state compares the rows a reader relies on when a row mask says which (one byte
    // per row of all axes but the last); without one, every row.
    const v::DenseMetrics m =
        row_mask ? v::compare_dense_masked({reference.data(), reference.size()}, {tested.data(), tested.size()},
                                           r.shape, {row_mask->data(), row_mask->size()}, *r.tolerance)
                 : v::compare_dense({reference.data(), reference.size()}, {tested.data(), tested.size()}, r.shape,
                                    *r.tolerance);
    r.status = m.status;
    r.metrics = m;
  }
  return r;
}

}  // namespace

void bind_verify(nb::module_& m) {
  nb::class_<v::Tolerance>(m, "Tolerance", "One row of a tolerance table (docs/tolerances.md).")
      .def(nb::init<>())
      .def_rw("atol", &v::Tolerance::atol)
      .def_rw("atol_rms", &v::Tolerance::atol_rms)
      .def_rw("rtol", &v::Tolerance::rtol)
      .def_rw("max_cos_diff", &v::Tolerance::max_cos_diff)
      .def_rw("max_nmse", &v::Tolerance::max_nmse)
      .def_rw("bitwise", &v::Tolerance::bitwise)
      .def_rw("reason", &v::Tolerance::reason);
  nb::class_<v::ToleranceTable>(m, "ToleranceTable",
                                "The project's tolerance table of a precision policy (data/tolerances/).")
      .def_static(
          "for_precision",
          [](const std::string& p, const std::string& dir) {
            return dir.empty() ? v::ToleranceTable::for_precision(p) : v::ToleranceTable::for_precision(p, dir);
          },
          "precision"_a, "directory"_a = "")
      .def_static(
          "load", [](const std::string& f) { return v::ToleranceTable::load(f); }, "file"_a)
      .def(
          "at", [](const v::ToleranceTable& t, const std::string& stage) { return t.at(stage); }, "stage"_a)
      .def_prop_ro("precision", &v::ToleranceTable::precision)
      .def_prop_ro("source", &v::ToleranceTable::source);
  m.def("default_tolerance_dir", [] { return v::default_tolerance_dir().string(); });

  nb::class_<v::ElementAt>(m, "ElementAt")
      .def_ro("index", &v::ElementAt::index)
      .def_ro("coord", &v::ElementAt::coord)
      .def_ro("ref", &v::ElementAt::ref)
      .def_ro("got", &v::ElementAt::got)
      .def("found", &v::ElementAt::found)
      .def("__repr__", [](const v::ElementAt& e) { return v::format_element(e); });
  nb::class_<v::DenseMetrics>(m, "DenseMetrics", "Every metric of a dense comparison (verify/compare/dense.h).")
      .def_ro("n", &v::DenseMetrics::n)
      .def_ro("n_finite", &v::DenseMetrics::n_finite)
      .def_ro("nonfinite_matched", &v::DenseMetrics::nonfinite_matched)
      .def_ro("nonfinite_mismatches", &v::DenseMetrics::nonfinite_mismatches)
      .def_ro("first_nonfinite_mismatch", &v::DenseMetrics::first_nonfinite_mismatch)
      .def_ro("max_abs", &v::DenseMetrics::max_abs)
      .def_ro("max_abs_at", &v::DenseMetrics::max_abs_at)
      .def_ro("max_rel", &v::DenseMetrics::max_rel)
      .def_ro("max_rel_at", &v::DenseMetrics::max_rel_at)
      .def_ro("mean_abs", &v::DenseMetrics::mean_abs)
      .def_ro("ref_rms", &v::DenseMetrics::ref_rms)
      .def_ro("nmse", &v::DenseMetrics::nmse)
      .def_ro("cos_diff", &v::DenseMetrics::cos_diff)
      .def_ro("atol", &v::DenseMetrics::atol)
      .def_ro("rtol", &v::DenseMetrics::rtol)
      .def_ro("elements_failed", &v::DenseMetrics::elements_failed)
      .def_ro("pass_fraction", &v::DenseMetrics::pass_fraction)
      .def_ro("min_atol_to_pass", &v::DenseMetrics::min_atol_to_pass)
      .def_ro("min_rtol_to_pass", &v::DenseMetrics::min_rtol_to_pass)
      .def_ro("bitwise_mismatches", &v::DenseMetrics::bitwise_mismatches)
      .def_ro("first_bitwise_mismatch", &v::DenseMetrics::first_bitwise_mismatch)
      .def_prop_ro("status", [](const v::DenseMetrics& d) { return v::to_string(d.status); })
      .def_ro("failed_gates", &v::DenseMetrics::failed_gates);
  nb::class_<v::RowDifference>(m, "RowDifference")
      .def_ro("row", &v::RowDifference::row)
      .def_ro("reason", &v::RowDifference::reason)
      .def_ro("ref_valid", &v::RowDifference::ref_valid)
      .def_ro("got_valid", &v::RowDifference::got_valid)
      .def_ro("missing", &v::RowDifference::missing)
      .def_ro("extra", &v::RowDifference::extra)
      .def_ro("missing_scores", &v::RowDifference::missing_scores)
      .def_ro("extra_scores", &v::RowDifference::extra_scores)
      .def_ro("threshold", &v::RowDifference::threshold);
  nb::class_<v::IndexSetMetrics>(m, "IndexSetMetrics", "A tie-aware index-set comparison (verify/compare/index_set.h).")
      .def_ro("rows", &v::IndexSetMetrics::rows)
      .def_ro("rows_exact", &v::IndexSetMetrics::rows_exact)
      .def_ro("rows_tie_equivalent", &v::IndexSetMetrics::rows_tie_equivalent)
      .def_ro("rows_failed", &v::IndexSetMetrics::rows_failed)
      .def_ro("padding_mismatches", &v::IndexSetMetrics::padding_mismatches)
      .def_ro("invalid_entries", &v::IndexSetMetrics::invalid_entries)
      .def_ro("mean_recall", &v::IndexSetMetrics::mean_recall)
      .def_ro("worst_recall", &v::IndexSetMetrics::worst_recall)
      .def_ro("worst_recall_row", &v::IndexSetMetrics::worst_recall_row)
      .def_ro("first_failure", &v::IndexSetMetrics::first_failure)
      .def_prop_ro("status", [](const v::IndexSetMetrics& d) { return v::to_string(d.status); });
  nb::class_<v::Record>(m, "Record", "One compared stage: what dsv4-verify prints for it (str(record) is that line).")
      .def_ro("layer", &v::Record::layer)
      .def_ro("call", &v::Record::call)
      .def_ro("stage", &v::Record::stage)
      .def_prop_ro(
          "status", [](const v::Record& r) { return v::to_string(r.status); }, "'PASS' or 'FAIL'")
      .def_prop_ro("passed", [](const v::Record& r) { return r.status == v::Status::pass; })
      .def_ro("shape", &v::Record::shape)
      .def_ro("dtype", &v::Record::dtype)
      .def_ro("note", &v::Record::note)
      .def_ro("tolerance", &v::Record::tolerance)
      .def_prop_ro("metrics",
                   [](const v::Record& r) -> nb::object {
                     if (auto* d = std::get_if<v::DenseMetrics>(&r.metrics)) return nb::cast(*d);
                     if (auto* i = std::get_if<v::IndexSetMetrics>(&r.metrics)) return nb::cast(*i);
                     return nb::none();
                   })
      .def_prop_ro(
          "reason", [](const v::Record& r) { return v::failure_detail(r); },
          "what failed and against which limits ('' on PASS)")
      .def("__str__", &v::record_lines)
      .def("__repr__", &v::record_lines)
      .def("__bool__", [](const v::Record& r) { return r.status == v::Status::pass; });
  m.def("compare_stage", &compare_stage, "stage"_a, "reference"_a, "tested"_a, "table"_a, "scores"_a = nb::none(),
        "offset"_a = 0, "row_mask"_a = nb::none(), "layer"_a = 0, "call"_a = 0, "dtype"_a = "",
        "Compares one stage with the table's row for it: dense stages with every metric and gate, index stages "
        "('indexer/topk', 'topk_idxs') as sets per row with the score tie window (scores [rows, n], column = index - "
        "offset).");

  m.def(
      "compare_index_sets",
      [](InAny reference, InAny tested, std::optional<In2> scores, double atol, double rtol, int64_t offset) {
        const std::vector<int64_t> rs = shape_of(reference), ts = shape_of(tested);
        if (rs.empty() || ts.empty()) throw std::invalid_argument("compare_index_sets: arrays of rank >= 1 needed");
        const std::vector<int64_t> ref_values = flat_int(reference), got_values = flat_int(tested);
        std::vector<double> score_values;
        v::ScoreRows score_rows{};
        if (scores) {
          score_values.assign(scores->data(), scores->data() + scores->size());
          score_rows = v::ScoreRows{score_values, static_cast<int64_t>(scores->shape(0)),
                                    static_cast<int64_t>(scores->shape(1))};
        }
        return v::compare_index_sets(v::IndexRows{ref_values, rows_of(rs), rs.back()},
                                     v::IndexRows{got_values, rows_of(ts), ts.back()}, score_rows,
                                     v::ScoreTolerance{atol, rtol}, offset);
      },
      "reference"_a, "tested"_a, "scores"_a = nb::none(), "atol"_a = 0.0, "rtol"_a = 0.0, "offset"_a = 0,
      "Tie-aware top-k set comparison per row (-1 = unused): equal sets pass; otherwise every missing and extra index "
      "must "
      "score within atol + rtol|thr| of the row's k-th reference score thr (scores [rows, n], column = index - "
      "offset).");
  m.def(
      "stage_names",
      [] {
        nb::list l;
        for (const ref::StageDef& n : ref::stages())
          l.append(nb::make_tuple(std::string(n.name), std::string(n.shape_doc), n.is_index(),
                                  std::string(ref::scope_text(n.scope)),
                                  std::string(ref::comparison_name(n.comparison)),
                                  n.tie_scores ? std::string(ref::stage(*n.tie_scores).name) : std::string()));
        return l;
      },
      "The stage registry (reference/stage_registry.h): (name, shape, is_index, which layers have it, comparison, "
      "tie-score stage), in the capture format's order.");
}

}  // namespace dsv4::python
