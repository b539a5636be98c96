#pragma once
// Valid synthetic captures for the capture I/O tests: a small configuration, every stage dataset of
// the table (cache datasets included), random float32-representable values, -inf in some score
// and state_score slots, random in-range indices. Deterministic for a seed.
#include <cstdint>
#include <string>
#include <vector>

#include "verify/capture/capture.h"

namespace dsv4::verify::testing {

struct CallSpec {
  int64_t start_pos = 0;
  int64_t seqlen = 1;
};

// ModelConfig::tiny() shrunk further (dim 128, 2 heads, indexer 2 x 64, window 8, top-k 4,
// max_seq_len 256); still passes ModelConfig::validate.
ref::ModelConfig micro_config();

// One layer per ratio (layer index = position in `ratios`), each with the same calls.
Capture synthetic_capture(const std::vector<int>& ratios, const std::vector<CallSpec>& calls, int batch, uint64_t seed);

// A fresh path in the temporary directory, unique within this process and across processes.
std::string temp_path(const std::string& stem);

// Removes the file when the test is done.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& stem) : path(temp_path(stem)) {}
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
};

}  // namespace dsv4::verify::testing
