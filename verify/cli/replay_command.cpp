// dsv4-verify replay FILE: one record per (layer, call, stage), printed on stdout (console.h: one
// line per stage, or every record with --verbose) and optionally written as JSON / Markdown; exit
// 0 no stage fails, 1 a stage fails, 2 bad input. The first failure is printed with the command
// that replays exactly that record (--layer L --call K --stage S).
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <exception>

#include "reference/stage_registry.h"
#include "verify/capture/isolated_read.h"
#include "verify/cli/commands.h"
#include "verify/report/console.h"
#include "verify/report/json.h"
#include "verify/report/markdown.h"

namespace dsv4::verify::cli {

namespace {

// --stage: a compared stage's exact name selects that stage alone; anything else is a regex.
std::string stage_filter(const std::string& stage) {
  const ref::StageDef* s = ref::find_stage(stage);
  if (!s || !s->is_compared()) return stage;
  std::string anchored = "^";
  for (char c : stage) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) anchored += '\\';
    anchored += c;
  }
  return anchored + "$";
}

// The options that shape a record's values, as typed, for the command that replays one record.
std::vector<std::string> record_options(const ReplayArgs& a) {
  std::vector<std::string> o;
  if (a.mode != "stage-local") o.insert(o.end(), {"--mode", a.mode});
  if (!a.precision.empty()) o.insert(o.end(), {"--precision", a.precision});
  if (a.backend != "cpu") o.insert(o.end(), {"--backend", a.backend});
  if (!a.tolerances.empty()) o.insert(o.end(), {"--tolerances", a.tolerances});
  if (!a.probs_convention.empty()) o.insert(o.end(), {"--probs-convention", a.probs_convention});
  return o;
}

}  // namespace

CLI::App* add_replay(CLI::App& app, ReplayArgs& a) {
  CLI::App* c = app.add_subcommand(
      "replay",
      "Replay a capture through the CPU oracle and compare every captured stage: one record per layer, call and "
      "stage (in the order of the capture format's stage table), PASS/FAIL against the tolerance table, MISSING "
      "for a stage the capture lacks. Stages the --stage filter leaves out are not reported.");
  c->add_option("FILE", a.file, "the capture (HDF5, docs/capture-format.md)")->required();
  c->add_option("--mode", a.mode,
                "stage-local (default): each stage from the captured inputs of that stage; chained: every stage "
                "from x and the replay's own earlier results")
      ->check(CLI::IsMember({"stage-local", "chained"}));
  c->add_option_function<int>(
      "--layer", [&a](const int& v) { a.layer = v; }, "only layer L (its index in the file)");
  c->add_option_function<int>(
      "--call", [&a](const int& v) { a.call = v; },
      "only call K (earlier calls are replayed for their state, not reported)");
  c->add_option(
      "--stage", a.stage,
      "only this stage: a stage name selects exactly that stage ('q' is q alone); anything else is a "
      "REGEX searched in the names (ECMAScript: 'attn' selects attn/*, 'q' would select every name with a q)");
  c->add_option("--backend", a.backend, "cpu (the oracle, default) or cuda (the CUDA kernels where they exist)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  c->add_option(
      "--precision", a.precision,
      "precision policy to replay (official, exact, fp8-indexer, ...); default: the capture's /config precision");
  c->add_option("--tolerances", a.tolerances, "tolerance table (JSON); default: data/tolerances/<precision>.json");
  c->add_option("--probs-convention", a.probs_convention,
                "the probability convention of the producer's attn/core (docs/tolerances.md \"Probability "
                "flips\"): deepseek (blocks of 64 in index order, running max, bf16 probabilities before P.V: "
                "each output element judged by the bf16 flips its own probabilities can make) or any (another "
                "block order, split-KV, ...: the tolerance row's bound); default: the capture's attribute "
                "probs_convention, any where it has none")
      ->check(CLI::IsMember({"deepseek", "any"}));
  c->add_option("--json", a.json, "also write the report as JSON to this file (whole or not at all)");
  c->add_option("--markdown", a.markdown, "also write the report as Markdown to this file (whole or not at all)");
  c->add_flag("--fail-fast", a.fail_fast, "stop at the first failing stage");
  c->add_flag("-v,--verbose", a.verbose,
              "print every record (layer, call, stage) with all its metrics; by default one line per stage");
  c->add_flag_callback(
      "--diagnose", [&a] { a.diagnose = "differing"; },
      "diagnose also the stages that pass but are not bitwise the oracle's (first such call of each "
      "stage); by default only failing stages are: the first failing call of each is replayed under "
      "the numerics variants that apply to it (`dsv4-verify mutations`) and the one that reproduces "
      "the capture is named (about one replay of that call per variant)");
  c->add_flag_callback(
      "--no-diagnose", [&a] { a.diagnose = "none"; }, "no diagnosis");
  c->add_flag("--progress", a.progress, "print a progress line on stderr (default: only when stderr is a terminal)");
  return c;
}

int run_replay(const ReplayArgs& a, Io io) {
  const bool show_progress = a.progress || io.err_is_terminal;
  bool progress_shown = false;
  auto progress = [&](const ReplayProgress& p) {
    if (!show_progress) return;
    const std::string line =
        fmt::format("replay: layer {} ({}/{}), call {}/{}", p.layer, p.layer_number, p.layers, p.call + 1, p.calls);
    if (io.err_is_terminal)
      fmt::print(io.err, "\r{}\x1b[K", line);
    else
      fmt::print(io.err, "{}\n", line);
    io.err.flush();
    progress_shown = true;
  };
  auto end_progress = [&] {
    if (progress_shown && io.err_is_terminal) fmt::print(io.err, "\r\x1b[K");
  };

  Report report;
  try {
    const Capture capture = read_capture_isolated(a.file);
    ReplayOptions options;
    options.mode = replay_mode_from_string(a.mode);
    options.precision = a.precision;
    options.backend = a.backend;
    options.tolerances = a.tolerances;
    options.layer = a.layer;
    options.call = a.call;
    options.stage_regex = stage_filter(a.stage);
    options.fail_fast = a.fail_fast;
    if (!a.probs_convention.empty()) options.probs_convention = probs_convention_from_string(a.probs_convention);
    options.diagnose = a.diagnose == "none"        ? DiagnoseScope::none
                       : a.diagnose == "differing" ? DiagnoseScope::differing
                                                   : DiagnoseScope::failing;
    report = replay_capture(capture, options, progress);
    report.command = a.command_line;
    report.record_options = record_options(a);
    end_progress();
    write_console(io.out, report, ConsoleOptions{a.verbose});
    io.out.flush();
    if (!a.json.empty()) write_json_file(a.json, report);
    if (!a.markdown.empty()) write_markdown_file(a.markdown, report);
  } catch (const std::exception& e) {
    end_progress();
    fmt::print(io.err, "dsv4-verify replay: {}\n", e.what());
    return kExitBadInput;
  }
  return report.counts().failed > 0 ? kExitFail : kExitPass;
}

}  // namespace dsv4::verify::cli
