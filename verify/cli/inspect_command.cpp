// dsv4-verify inspect FILE: what a capture holds, validated (exit 2 with the reader's one-line
// message naming the dataset, expected and found, when it is not a valid capture).
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <exception>

#include "verify/capture/isolated_read.h"
#include "verify/cli/commands.h"
#include "verify/replay/inspect.h"

namespace dsv4::verify::cli {

CLI::App* add_inspect(CLI::App& app, InspectArgs& a) {
  CLI::App* c = app.add_subcommand(
      "inspect",
      "List what a capture holds (attributes, config, layers and ratios, calls with start_pos and seqlen, datasets "
      "with shape and dtype, the reader's notes) and validate it: exit 2 naming what is wrong.");
  c->add_option("FILE", a.file, "the capture (HDF5)")->required();
  return c;
}

int run_inspect(const InspectArgs& a, Io io) {
  try {
    const Capture capture = read_capture_isolated(a.file);
    describe_capture(io.out, capture);
    fmt::print(io.out, "\nvalid: {} follows capture format version 1\n", a.file);
  } catch (const std::exception& e) {
    fmt::print(io.err, "dsv4-verify inspect: invalid capture: {}\n", e.what());
    return kExitBadInput;
  }
  return kExitPass;
}

}  // namespace dsv4::verify::cli
