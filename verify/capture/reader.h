#pragma once
// Reading a capture file (format v1, docs/capture-format.md), validated as it is read: every
// known dataset against its expected type, shape and values; every required attribute and
// dataset present. Unknown members are skipped and listed in Capture::notes.
#include <cstdint>
#include <string>

#include "verify/capture/capture.h"
#include "verify/capture/capture_error.h"

namespace dsv4::verify {

struct ReadOptions {
  // Largest dataset read, in elements; a larger one is refused before memory is allocated. The
  // default (2^31) holds a Flash layer's 64K-token prefill; the fuzzer sets it small.
  int64_t max_dataset_elements = int64_t{1} << 31;
};

// Throws CaptureError for every kind of bad input (see docs/capture-format.md "Validation").
// Not thread-safe: the HDF5 library (serial build) is shared process state.
Capture read_capture(const std::string& path, const ReadOptions& options = {});

}  // namespace dsv4::verify
