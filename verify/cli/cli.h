#pragma once
// dsv4-verify: replay captures through the oracle (or the CUDA kernels), make synthetic captures,
// inspect captures. run_cli is main() without the process: the tests call it in-process.
// Exit status: 0 every compared stage passed (or the command succeeded), 1 a stage failed,
// 2 bad input or usage (one line on `err` naming what, expected and found; no report file written).
#include <ostream>

namespace dsv4::verify::cli {

struct Io {
  std::ostream& out;
  std::ostream& err;
  bool err_is_terminal = false;  // progress lines go to `err` when it is a terminal (or --progress)
};

int run_cli(int argc, const char* const* argv, Io io);

}  // namespace dsv4::verify::cli
