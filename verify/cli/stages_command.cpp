// dsv4-verify stages [--json]: the stage registry (reference/stage_registry.h), one line per
// dataset of a call: its name, which layers have it, shape, values, how the replay compares it,
// the stage whose scores decide its ties, the entry that computes it and the storage DeepSeek's
// code holds it in; then the optional pre-quantization datasets (reference/pre_quant.h). The names
// are the ones captures, tolerance tables and reports use.
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include "reference/numerics/storage.h"
#include "reference/pre_quant.h"
#include "reference/precision.h"
#include "reference/stage_registry.h"
#include "verify/cli/commands.h"

namespace dsv4::verify::cli {

namespace {

std::string_view values_text(ref::StageValues v) {
  switch (v) {
    case ref::StageValues::finite: return "finite";
    case ref::StageValues::finite_or_minus_inf: return "finite or -inf";
    case ref::StageValues::index: return "indices";
  }
  return "";
}

std::string held_text(const ref::StageDef& s) {
  return s.is_index() ? "int32" : ref::to_string(s.storage(ref::PrecisionPolicy::official()));
}

}  // namespace

CLI::App* add_stages(CLI::App& app, StagesArgs& a) {
  CLI::App* c = app.add_subcommand(
      "stages",
      "List the stages of a call (the datasets of calls/<k>/ in a capture): name, layers, shape, values, "
      "comparison, tie scores, the backend entry that computes it, and its storage in official precision; then "
      "the optional pre-quantization datasets.");
  c->add_flag("--json", a.json, "one JSON array of objects instead of the table");
  return c;
}

int run_stages(const StagesArgs& a, Io io) {
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const ref::StageDef& s : ref::stages()) {
      rows.push_back({{"name", s.name},
                      {"layers", ref::scope_text(s.scope)},
                      {"shape", s.shape_doc},
                      {"values", values_text(s.values)},
                      {"comparison", ref::comparison_name(s.comparison)},
                      {"tie_scores", s.tie_scores ? ref::stage(*s.tie_scores).name : ""},
                      {"entry", ref::entry_name(s.entry)},
                      {"official_storage", held_text(s)}});
    }
    for (const ref::PreQuantDef& p : ref::pre_quant_datasets()) {
      const ref::StageDef& s = ref::stage(p.stage);
      rows.push_back({{"name", p.name},
                      {"layers", ref::scope_text(s.scope)},
                      {"shape", s.shape_doc},
                      {"values", values_text(s.values)},
                      {"comparison", ref::comparison_name(ref::Comparison::none)},
                      {"tie_scores", ""},
                      {"entry", ref::entry_name(s.entry)},
                      {"official_storage", held_text(s)},
                      {"pre_quant_of", s.name}});
    }
    fmt::print(io.out, "{}\n", rows.dump(1));
    return kExitPass;
  }
  fmt::print(io.out, "{:<37} {:<24} {:<20} {:<15} {:<24} {:<19} {}\n", "stage", "layers", "shape", "values",
             "comparison", "entry", "official storage");
  for (const ref::StageDef& s : ref::stages()) {
    fmt::print(io.out, "{:<37} {:<24} {:<20} {:<15} {:<24} {:<19} {}\n", s.name, ref::scope_text(s.scope), s.shape_doc,
               values_text(s.values), ref::comparison_name(s.comparison), ref::entry_name(s.entry), held_text(s));
  }
  fmt::print(io.out,
             "\noptional pre-quantization values (docs/capture-format.md), each shaped and held as its stage:\n");
  for (const ref::PreQuantDef& p : ref::pre_quant_datasets())
    fmt::print(io.out, "{:<37} the value of {} before its final rounding\n", p.name, ref::stage(p.stage).name);
  return kExitPass;
}

}  // namespace dsv4::verify::cli
