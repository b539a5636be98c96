// dsv4-verify mutations [--json]: the bug classes the oracle can inject (reference/mutation.h),
// one line per mutation: its name (STAGE:BUG, the argument of `synth --inject-bug` and of the
// DeepSeek adapter's --inject-bug), the stage it is injected at, and what it simulates.
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include "reference/mutation.h"
#include "verify/cli/commands.h"

namespace dsv4::verify::cli {

CLI::App* add_mutations(CLI::App& app, MutationsArgs& a) {
  CLI::App* c = app.add_subcommand(
      "mutations",
      "List the bugs the oracle can inject (synth --inject-bug STAGE:BUG) and the replay's diagnosis "
      "tries on a failing stage: name, stage, kind (numerics: inside the stage's arithmetic; output: "
      "its result altered) and what it simulates.");
  c->add_flag("--json", a.json, "one JSON array of objects instead of the table");
  return c;
}

int run_mutations(const MutationsArgs& a, Io io) {
  const std::vector<ref::Mutation> all = ref::all_mutations();
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const ref::Mutation& m : all)
      rows.push_back({{"name", m.name()},
                      {"stage", ref::stage(m.stage).name},
                      {"bug", ref::deviation_name(m.deviation)},
                      {"kind", m.alters_output() ? "output" : "numerics"},
                      {"describe", m.describe()}});
    fmt::print(io.out, "{}\n", rows.dump(1));
    return kExitPass;
  }
  fmt::print(io.out, "{:<58} {:<9} {}\n", "mutation", "kind", "simulates");
  for (const ref::Mutation& m : all)
    fmt::print(io.out, "{:<58} {:<9} {}\n", m.name(), m.alters_output() ? "output" : "numerics", m.describe());
  return kExitPass;
}

}  // namespace dsv4::verify::cli
