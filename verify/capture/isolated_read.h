#pragma once
// Reading a capture in a separate process, under memory and time limits. libhdf5 1.10.8 is not
// robust against damaged files: fuzzing found files that make it read past a heap buffer, ask for
// 2^61 bytes, or run for minutes (docs/capture-format.md, "Fuzzing the reader"). Captures come from
// other people's engines, so dsv4-verify never opens one in its own process: a child process
// (fork) opens and reads it with read_capture under setrlimit limits and a wall-clock deadline,
// then hands the capture over through a pipe (capture_codec.h). Whatever happens to the child, the
// caller gets a Capture or a CaptureError whose one-line message names the file and what happened.
//
// fork without exec: the child runs read_capture (malloc, libhdf5, C++ exceptions), which is safe
// because glibc makes malloc usable after fork and no other thread of the caller is inside libhdf5
// (the library is serial; read_capture is not thread-safe either). The alternative, exec'ing a
// helper program, would need that program installed beside every binary that links dsv4_verify.
#include <optional>
#include <string>

#include "verify/capture/capture.h"
#include "verify/capture/capture_error.h"
#include "verify/capture/reader.h"

namespace dsv4::verify {

struct ReadLimits {
  double seconds = 0;        // wall-clock time for opening, reading and handing over the capture
  int64_t memory_bytes = 0;  // address space the child may add to what it inherits

  // The defaults for a file: 60 s plus 1 s per 10 MiB of file (a capture reads at well over
  // 100 MiB/s; the base covers a loaded machine), and the machine's physical memory (a capture that
  // needs more cannot be replayed here anyway). The environment variables DSV4_READ_SECONDS and
  // DSV4_READ_MEMORY_MIB replace them; a value that is not a positive number is an error.
  static ReadLimits for_file(const std::string& path);
};

inline constexpr const char* kReadSecondsEnv = "DSV4_READ_SECONDS";
inline constexpr const char* kReadMemoryEnv = "DSV4_READ_MEMORY_MIB";

// read_capture(path, options) in a child process under `limits` (ReadLimits::for_file(path) when
// not given). Throws CaptureError: the reader's own (unchanged: file, object, expected, found), or,
// with object "/", when the child ran out of time, out of memory, crashed (a signal), or ended
// without handing over a capture.
Capture read_capture_isolated(const std::string& path, const ReadOptions& options = {},
                              const std::optional<ReadLimits>& limits = std::nullopt);

}  // namespace dsv4::verify
