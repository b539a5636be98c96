// dsv4-verify (verify/cli/cli.h).
#include <unistd.h>

#include <iostream>

#include "verify/cli/cli.h"

int main(int argc, char** argv) {
  return dsv4::verify::cli::run_cli(argc, argv, {std::cout, std::cerr, ::isatty(STDERR_FILENO) == 1});
}
