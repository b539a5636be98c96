// dsv4-verify precision-report FILE | --synth CONFIG [--seeds N]: every precision policy against the
// exact one (verify/precision/precision_report.h), over seeds with 95% intervals
// (verify/precision/seeded_report.h), as JSON, optionally Markdown and plots; exit 0, or 2 for bad
// input (nothing written). Output paths are checked before the (possibly long) run.
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <unistd.h>

#include <exception>
#include <filesystem>
#include <optional>

#include "verify/capture/isolated_read.h"
#include "verify/cli/commands.h"
#include "verify/precision/plots.h"
#include "verify/precision/precision_report.h"
#include "verify/precision/report_json.h"
#include "verify/precision/report_markdown.h"
#include "verify/precision/seeded_report.h"
#include "verify/report/atomic_file.h"

namespace dsv4::verify::cli {

namespace {

namespace fs = std::filesystem;

// A file can be written at `path` when its folder exists and is writable.
void check_writable_file(const std::string& option, const std::string& path) {
  const fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (p.filename().empty() || fs::is_directory(p))
    throw std::invalid_argument(fmt::format("{} {}: expected a file name, found a folder", option, path));
  if (!fs::is_directory(dir))
    throw std::invalid_argument(fmt::format("{} {}: the folder {} does not exist", option, path, dir.string()));
  if (::access(dir.c_str(), W_OK) != 0)
    throw std::invalid_argument(fmt::format("{} {}: the folder {} is not writable", option, path, dir.string()));
}

void check_plot_dir(const std::string& dir) {
  const fs::path p(dir);
  if (fs::exists(p) && !fs::is_directory(p))
    throw std::invalid_argument(fmt::format("--plots {}: expected a folder, found a file", dir));
  const fs::path parent = fs::absolute(p).parent_path();
  if (!fs::is_directory(parent))
    throw std::invalid_argument(fmt::format("--plots {}: the folder {} does not exist", dir, parent.string()));
}

void print_summary(std::ostream& out, const SeededReport& r) {
  fmt::print(out, "precision report on {} input ({} weights): {}\n", r.input.kind, to_string(r.input.weights),
             r.input.description);
  if (r.seed_count() > 1) fmt::print(out, "mean over {} seeds [95% interval]\n", r.seed_count());
  for (size_t l = 0; l < r.policies.front().layers.size(); ++l) {
    const LayerOverSeeds& first = r.policies.front().layers[l];
    fmt::print(out, "layer {} (ratio {}):\n  {:<34} {:>28} {:>28} {:>28}\n", first.layer, first.compress_ratio,
               "policy", "recall (rows with a choice)", "attn NMSE", "out NMSE");
    for (const PolicyOverSeeds& p : r.policies) {
      const LayerOverSeeds& layer = p.layers[l];
      const std::string recall = layer.recall && layer.recall->rows_with_choice > 0
                                     ? format_interval(layer.recall->mean_with_choice, format_recall)
                                     : "-";
      fmt::print(out, "  {:<34} {:>28} {:>28} {:>28}\n", p.policy.name, recall,
                 format_interval(layer.stage(kAttentionOutputStage).nmse),
                 format_interval(layer.stage(kLayerOutputStage).nmse));
    }
  }
}

}  // namespace

CLI::App* add_precision_report(CLI::App& app, PrecisionReportArgs& a) {
  CLI::App* c = app.add_subcommand(
      "precision-report",
      "Run a capture's layers (from their captured x and weights), or synthetic inputs at a model's real dims, under "
      "each precision policy and compare every stage with the exact policy: per stage NMSE, cos-diff and max "
      "relative error; end to end the indexer's top-k recall against the exact indexer (mean, worst row, by query "
      "position) and the attention-output and layer-output error. The report states the kind of input and where "
      "the weights come from.");
  CLI::Option* file = c->add_option("FILE", a.file, "the capture (HDF5, docs/capture-format.md)");
  CLI::Option* synth = c->add_option("--synth", a.synth,
                                     "synthetic inputs at the dims of this config instead: tiny, "
                                     "flash or pro (random weights, x ~ N(0,1) in bf16)")
                           ->check(CLI::IsMember({"tiny", "flash", "pro"}));
  file->excludes(synth);
  SyntheticInputOptions& o = a.synth_options;
  c->add_option("--ratio", o.ratios, "--synth: compress ratio of each layer (default 4)")
      ->delimiter(',')
      ->check(CLI::IsMember({0, 4, 128}))
      ->needs(synth);
  c->add_option("--prefill", o.prefill, "--synth: prefill tokens per sequence (default 512)")->needs(synth);
  c->add_option("--chunk", o.chunk,
                "--synth: run the prefill in calls of at most this many tokens (bitwise the same values; bounds "
                "memory; default: one call)")
      ->needs(synth);
  c->add_option("--decode", o.decode, "--synth: one-token decode calls after the prefill (default 0)")->needs(synth);
  c->add_option("--batch", o.batch, "--synth: sequences (default 1)")->needs(synth);
  c->add_option("--seed", o.seed, "--synth: seed of the weights and inputs (default 1); the first with --seeds")
      ->needs(synth);
  c->add_option("--seeds", a.seeds,
                "--synth: run seeds SEED, SEED+1, ... (each its own weights and inputs) and report every figure as "
                "the mean over seeds with a 95% interval (default 1: no intervals)")
      ->check(CLI::PositiveNumber)
      ->needs(synth);
  c->add_option("--checkpoint", a.checkpoint,
                "--synth: a folder for each seed's and policy's figures (seed-N/POLICY.json), written as each seed "
                "ends; a run with the same options resumes from them")
      ->needs(synth);
  c->add_option("--max-seq-len", o.max_seq_len,
                "--synth: raise the config's max_seq_len (a multiple of 128) for longer sequences (default: the "
                "config's, 4096 for flash and pro)")
      ->needs(synth);
  ActivationModel& m = o.activations;
  c->add_option("--x-heavy-channels", m.x_heavy_channels,
                "--synth activation model: channels of x offset by +-SCALE sd for every token (massive activations; "
                "default 0)")
      ->needs(synth);
  c->add_option("--x-heavy-scale", m.x_heavy_scale, "--synth activation model: that offset, in sd (default 100)")
      ->needs(synth);
  c->add_option("--x-tail-dof", m.x_tail_dof,
                "--synth activation model: rows of Student-t entries with this many degrees of freedom (>= 3), "
                "variance 1 (default 0: normal)")
      ->needs(synth);
  c->add_option("--qk-heavy-channels", m.qk_heavy_channels,
                "--synth activation model: dims of every head SCALE times larger in the projected q and k, in the "
                "attention and the indexer (default 0)")
      ->needs(synth);
  c->add_option("--qk-heavy-scale", m.qk_heavy_scale, "--synth activation model: that gain (default 10)")->needs(synth);
  c->add_option("--policies", a.policies,
                "policies to compare with exact, comma-separated (default: every named policy: exact, official, "
                "fp8-indexer, fp8-indexer-no-hadamard, fp4-indexer-no-hadamard, no-kv-quant, bf16, fp32, "
                "mxfp4-indexer, nvfp4-indexer, fp32-probs, fp32-indexer-scores, fp8-indexer-keys-only, "
                "fp4-indexer-keys-only; NAME-no-hadamard turns the rotation off in a policy that quantizes the "
                "indexer q/k)")
      ->delimiter(',');
  c->add_option("--weights", a.weights, "where the capture's weights come from, when the capture does not say")
      ->check(CLI::IsMember({"random", "real", "unknown"}))
      ->excludes(synth);
  c->add_option("--position-bucket", a.position_bucket,
                "query positions per recall bucket (default: the longest sequence / 16)");
  c->add_option("--json", a.json, "the JSON report (whole or not at all)")->required();
  c->add_option("--markdown", a.markdown, "also the Markdown report (whole or not at all)");
  c->add_option("--plots", a.plots, "also plots (PNG and SVG) into this folder (each whole or absent)");
  c->add_flag("--progress", a.progress, "print a progress line on stderr (default: only when stderr is a terminal)");
  return c;
}

int run_precision_report(const PrecisionReportArgs& a, Io io) {
  const bool show_progress = a.progress || io.err_is_terminal;
  bool progress_shown = false;
  auto progress = [&](const PrecisionProgress& p) {
    if (!show_progress) return;
    const std::string seed =
        p.seeds > 1 ? fmt::format("seed {} ({}/{}), ", p.seed, p.seed_index + 1, p.seeds) : std::string();
    const std::string line = fmt::format("precision-report: {}layer {}, call {}/{}, policy {}", seed, p.layer,
                                         p.call + 1, p.calls, p.policy);
    if (io.err_is_terminal)
      fmt::print(io.err, "\r{}\x1b[K", line);
    else
      fmt::print(io.err, "{}\n", line);
    io.err.flush();
    progress_shown = true;
  };
  auto end_progress = [&] {
    if (progress_shown && io.err_is_terminal) fmt::print(io.err, "\r\x1b[K");
    progress_shown = false;
  };

  try {
    if (a.file.empty() == a.synth.empty())
      throw std::invalid_argument("expected a capture FILE or --synth CONFIG, found neither");
    resolve_policies(a.policies);  // an unknown name fails before anything runs
    check_writable_file("--json", a.json);
    if (!a.markdown.empty()) check_writable_file("--markdown", a.markdown);
    const PlotCommand plot_command = default_plot_command();
    if (!a.plots.empty()) {
      check_plot_dir(a.plots);
      check_plotting(plot_command);
    }

    PrecisionReportOptions options;
    options.policies = a.policies;
    options.position_bucket = a.position_bucket;
    SeededReport report;
    if (!a.synth.empty()) {
      SeededReportOptions so;
      so.input = a.synth_options;
      so.input.config = a.synth;
      so.seeds = a.seeds;
      so.report = options;
      if (!a.checkpoint.empty()) so.checkpoint = a.checkpoint;
      report = run_seeded_report(so, progress);
    } else {
      const Capture capture = read_capture_isolated(a.file);
      InputInfo info = capture_input_info(capture);
      if (!a.weights.empty()) info = with_stated_weights(info, weights_origin_from_string(a.weights));
      report = single_report(verify::run_precision_report(capture, info, options, progress));
    }
    report.command = a.command_line;
    end_progress();

    if (!a.plots.empty()) {
      // The script reads the report from a file: a private copy, removed afterwards.
      const fs::path temp = fs::temp_directory_path() / fmt::format("dsv4-precision-report-{}.json", ::getpid());
      write_precision_json_file(temp, report);
      try {
        make_plots(plot_command, temp, a.plots);
      } catch (...) {
        fs::remove(temp);
        throw;
      }
      fs::remove(temp);
    }
    write_precision_json_file(a.json, report);
    if (!a.markdown.empty()) write_precision_markdown_file(a.markdown, report);
    print_summary(io.out, report);
  } catch (const std::exception& e) {
    end_progress();
    fmt::print(io.err, "dsv4-verify precision-report: {}\n", e.what());
    return kExitBadInput;
  }
  return kExitPass;
}

}  // namespace dsv4::verify::cli
