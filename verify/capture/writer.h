#pragma once
// Writing a capture file (format v1). The file appears whole or not at all: it is written to
// "<path>.tmp-<pid>" and renamed over `path`; on any error the temporary file is removed.
// The writer stores what it is given without validating it (read_capture validates), so tests can
// also write broken captures.
#include <string>

#include "verify/capture/capture.h"
#include "verify/hdf5/error.h"
#include "verify/hdf5/group.h"

namespace dsv4::verify {

// Float tensors are stored as float32 (values round to nearest float) with attr `dtype`; index
// tensors as int32 (values must be integers in int32 range, else std::invalid_argument). Weights
// of the layer's ratio (weight_names.h) are stored as float32 with attr `linear` on projections
// (weight_linear_kinds, else the spec's kind). Throws hdf5::Error when HDF5 fails.
void write_capture(const std::string& path, const Capture& capture, const hdf5::WriteOptions& options = {});

}  // namespace dsv4::verify
