#pragma once
// The subcommands of dsv4-verify, one file each: add_* declares the options on the app, run_*
// runs the parsed command and returns the exit status (cli.h).
#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

#include "verify/cli/cli.h"
#include "verify/precision/synthetic_input.h"
#include "verify/replay/replay.h"
#include "verify/replay/synth.h"

namespace dsv4::verify::cli {

inline constexpr int kExitPass = 0;
inline constexpr int kExitFail = 1;
inline constexpr int kExitBadInput = 2;

struct ReplayArgs {
  std::string file;
  std::string mode = "stage-local";
  std::optional<int> layer;
  std::optional<int> call;
  std::string stage;
  std::string backend = "cpu";
  std::string precision;
  std::string tolerances;
  std::string json;
  std::string markdown;
  bool fail_fast = false;
  bool progress = false;
  bool verbose = false;              // the console prints every record, not one line per stage
  std::string diagnose = "failing";  // none | failing | differing
  std::string probs_convention;      // deepseek | any; "" = the capture's attribute
  std::string command_line;          // the command as typed, for the report's "reproduce" line
};
CLI::App* add_replay(CLI::App& app, ReplayArgs& args);
int run_replay(const ReplayArgs& args, Io io);

struct SynthArgs {
  SynthOptions options;
  std::string output;
};
CLI::App* add_synth(CLI::App& app, SynthArgs& args);
int run_synth(const SynthArgs& args, Io io);

struct MutationsArgs {
  bool json = false;
};
CLI::App* add_mutations(CLI::App& app, MutationsArgs& args);
int run_mutations(const MutationsArgs& args, Io io);

struct InspectArgs {
  std::string file;
};
CLI::App* add_inspect(CLI::App& app, InspectArgs& args);
int run_inspect(const InspectArgs& args, Io io);

struct StagesArgs {
  bool json = false;
};
CLI::App* add_stages(CLI::App& app, StagesArgs& args);
int run_stages(const StagesArgs& args, Io io);

struct PrecisionReportArgs {
  std::string file;   // a capture, or
  std::string synth;  // a config name: synthetic inputs at its dims
  SyntheticInputOptions synth_options;
  int seeds = 1;           // --synth: seeds synth_options.seed, +1, ... (weights and inputs each)
  std::string checkpoint;  // --synth: per seed and policy figures, to resume a killed run
  std::vector<std::string> policies;
  std::string weights;  // random | real | unknown: overrides what the capture implies
  int64_t position_bucket = 0;
  std::string json;
  std::string markdown;
  std::string plots;
  bool progress = false;
  std::string command_line;
};
CLI::App* add_precision_report(CLI::App& app, PrecisionReportArgs& args);
int run_precision_report(const PrecisionReportArgs& args, Io io);

}  // namespace dsv4::verify::cli
