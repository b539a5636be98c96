#include "verify/cli/cli.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "verify/cli/commands.h"

namespace dsv4::verify::cli {

namespace {

// The command as typed, each argument quoted when the shell would split or expand it.
std::string command_line(int argc, const char* const* argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i == 0) a = "dsv4-verify";
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./=:,+@%") == std::string::npos;
    line += (i ? " " : "") + (plain ? a : "'" + a + "'");
  }
  return line;
}

}  // namespace

int run_cli(int argc, const char* const* argv, Io io) {
  CLI::App app{
      "dsv4-verify: replay DeepSeek-V4 attention captures through the CPU oracle stage by stage, make synthetic "
      "captures, inspect captures, list the stages and the injectable bugs.\nExit status: 0 all compared stages pass, "
      "1 a stage fails, 2 bad input or usage."};
  app.name("dsv4-verify");
  app.require_subcommand(1);
  ReplayArgs replay;
  SynthArgs synth;
  InspectArgs inspect;
  PrecisionReportArgs precision_report;
  StagesArgs stages;
  MutationsArgs mutations;
  CLI::App* replay_cmd = add_replay(app, replay);
  CLI::App* synth_cmd = add_synth(app, synth);
  CLI::App* inspect_cmd = add_inspect(app, inspect);
  CLI::App* precision_report_cmd = add_precision_report(app, precision_report);
  CLI::App* stages_cmd = add_stages(app, stages);
  CLI::App* mutations_cmd = add_mutations(app, mutations);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, io.out, io.err);  // prints the help, or the error and a hint
    return code == 0 ? kExitPass : kExitBadInput;
  }
  if (*replay_cmd) {
    replay.command_line = command_line(argc, argv);
    return run_replay(replay, io);
  }
  if (*synth_cmd) return run_synth(synth, io);
  if (*inspect_cmd) return run_inspect(inspect, io);
  if (*stages_cmd) return run_stages(stages, io);
  if (*mutations_cmd) return run_mutations(mutations, io);
  if (*precision_report_cmd) {
    precision_report.command_line = command_line(argc, argv);
    return run_precision_report(precision_report, io);
  }
  return kExitBadInput;
}

}  // namespace dsv4::verify::cli
