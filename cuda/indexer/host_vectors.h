#pragma once
// Host-side indexer vectors as the kernels store them (formats.h): from the oracle's fake-quantized
// values to codes and scale bytes and back, and the paged key caches of indexer_api.h built from
// them. For the oracle-typed wrappers and the tests.
#include <cstdint>
#include <vector>

#include "cuda/indexer/formats.h"
#include "cuda/indexer/indexer_api.h"
#include "reference/tensor.h"

namespace dsv4::cuda {

struct HostVectors {
  IndexerFormat format = IndexerFormat::fp4;
  int64_t count = 0;
  std::vector<uint8_t> codes;   // [count, code_bytes]
  std::vector<uint8_t> scales;  // [count, 4] UE8M0 bytes (fp8: byte 0, the rest 0)
};

// values [n, m * 128]: every 128 consecutive values of a row one vector (a head of q, or a key),
// each already on the format's grid (the oracle's indexer q or the indexer compressor's entries) ->
// n * m vectors. The decomposition is the oracle's quantize_row of the values, which reproduces
// them exactly; throws std::invalid_argument naming the row and column of a value it does not
// reproduce (not on the grid, NaN, or a scale out of the UE8M0 range).
HostVectors quantize_vectors(const ref::Mat& values, IndexerFormat format);

// The values vectors [first, first + n) stand for: [n, 128] (exact doubles).
ref::Mat dequantize_vectors(const HostVectors& v, int64_t first, int64_t n);

// A paged cache of `pool_pages` pages holding, for every sequence b, its keys[b] (count keys) in the
// pages pages[b][0], pages[b][1], ... (pages[b].size() >= ceil(count / page_keys)); unused slots
// and pages are filled with `fill` (e.g. 0xFF: NaN e4m3 codes, NaN scales: what a kernel must never
// read). FP8 scale words are the fp32 scales (DeepGEMM's convention), FP4 ones the 4 UE8M0 bytes.
std::vector<uint8_t> pack_paged(const std::vector<HostVectors>& keys, const std::vector<std::vector<int32_t>>& pages,
                                IndexerCacheLayout layout, int page_keys, int64_t pool_pages, uint8_t fill);

}  // namespace dsv4::cuda
