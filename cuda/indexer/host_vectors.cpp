// Host-side indexer vectors and paged caches (host_vectors.h).
#include "cuda/indexer/host_vectors.h"

#include <cmath>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>

#include "cuda/common/numerics.cuh"
#include "cuda/indexer/cache_layout.cuh"
#include "cuda/indexer/indexer_math.cuh"
#include "reference/numerics/block_quant.h"

namespace dsv4::cuda {
namespace {

ref::BlockFormat block_format(IndexerFormat f) {
  return f == IndexerFormat::fp4 ? ref::BlockFormat::fp4_indexer() : ref::BlockFormat::fp8_per_head(kIndexerDim);
}

}  // namespace

HostVectors quantize_vectors(const ref::Mat& values, IndexerFormat format) {
  if (values.cols() % kIndexerDim != 0)
    throw std::invalid_argument("quantize_vectors: rows of " + std::to_string(values.cols()) +
                                " values, expected a multiple of " + std::to_string(kIndexerDim));
  const int64_t per_row = values.cols() / kIndexerDim;
  const ref::BlockFormat bf = block_format(format);
  HostVectors out;
  out.format = format;
  out.count = values.rows() * per_row;
  out.codes.assign(static_cast<size_t>(out.count * code_bytes(format)), 0);
  out.scales.assign(static_cast<size_t>(out.count * kIndexerScaleBytes), 0);
  std::vector<double> vec(kIndexerDim);
  for (ref::Index r = 0; r < values.rows(); ++r)
    for (int64_t m = 0; m < per_row; ++m) {
      const int64_t id = r * per_row + m;
      for (int c = 0; c < kIndexerDim; ++c) vec[static_cast<size_t>(c)] = values(r, m * kIndexerDim + c);
      const ref::QuantizedRow q = ref::quantize_row(bf, std::span<const double>(vec));
      for (int c = 0; c < kIndexerDim; ++c) {
        const double scale = q.scales[static_cast<size_t>(c / bf.block)];
        const double element = q.q[static_cast<size_t>(c)];
        int e = 0;
        std::frexp(scale, &e);
        const int exponent = e - 1;  // scale = 2^exponent
        if (!(element * scale == vec[static_cast<size_t>(c)]) || exponent < -127 || exponent > 127)
          throw std::invalid_argument(
              "quantize_vectors: row " + std::to_string(r) + ", column " + std::to_string(m * kIndexerDim + c) +
              ": value " + std::to_string(vec[static_cast<size_t>(c)]) + " is not on the " + bf.name() + " grid");
        out.scales[static_cast<size_t>(id * kIndexerScaleBytes + c / bf.block)] = ue8m0_code(exponent);
        if (format == IndexerFormat::fp8) {
          out.codes[static_cast<size_t>(id * kIndexerDim + c)] = e4m3_code(static_cast<float>(element));
        } else {
          const uint8_t nibble = e2m1_code(static_cast<float>(element));
          out.codes[static_cast<size_t>(id * (kIndexerDim / 2) + c / 2)] |=
              static_cast<uint8_t>(c % 2 == 0 ? nibble : nibble << 4);
        }
      }
    }
  return out;
}

ref::Mat dequantize_vectors(const HostVectors& v, int64_t first, int64_t n) {
  if (first < 0 || n < 0 || first + n > v.count)
    throw std::invalid_argument("dequantize_vectors: vectors [" + std::to_string(first) + ", " +
                                std::to_string(first + n) + ") of " + std::to_string(v.count));
  ref::Mat m(n, kIndexerDim);
  for (int64_t i = 0; i < n; ++i) {
    const VectorView view{v.codes.data() + (first + i) * code_bytes(v.format),
                          v.scales.data() + (first + i) * kIndexerScaleBytes, v.format, false};
    for (int c = 0; c < kIndexerDim; ++c) m(i, c) = view.value(c);
  }
  return m;
}

std::vector<uint8_t> pack_paged(const std::vector<HostVectors>& keys, const std::vector<std::vector<int32_t>>& pages,
                                IndexerCacheLayout layout, int page_keys, int64_t pool_pages, uint8_t fill) {
  if (keys.size() != pages.size())
    throw std::invalid_argument("pack_paged: " + std::to_string(keys.size()) + " sequences but " +
                                std::to_string(pages.size()) + " page lists");
  if (keys.empty()) return {};
  const IndexerFormat f = keys[0].format;
  const int64_t cb = code_bytes(f);
  std::vector<uint8_t> pool(static_cast<size_t>(pool_pages * page_keys * (cb + kIndexerScaleBytes)), fill);
  for (size_t b = 0; b < keys.size(); ++b) {
    const HostVectors& k = keys[b];
    if (k.format != f) throw std::invalid_argument("pack_paged: sequences of different formats");
    for (int64_t t = 0; t < k.count; ++t) {
      const size_t p = static_cast<size_t>(t / page_keys);
      if (p >= pages[b].size() || pages[b][p] < 0 || pages[b][p] >= pool_pages)
        throw std::invalid_argument("pack_paged: sequence " + std::to_string(b) + " key " + std::to_string(t) +
                                    " has no page in the pool");
      const KeyOffsets at = key_offsets(layout, f, page_keys, pages[b][p], static_cast<int>(t % page_keys));
      std::memcpy(pool.data() + at.codes, k.codes.data() + t * cb, static_cast<size_t>(cb));
      uint8_t word[kIndexerScaleBytes];
      std::memcpy(word, k.scales.data() + t * kIndexerScaleBytes, kIndexerScaleBytes);
      if (f == IndexerFormat::fp8) {  // the fp32 scale, a power of two (exponents of this format are >= -126)
        const float s = pow2f(ue8m0_exponent(word[0]));
        std::memcpy(word, &s, sizeof s);
      }
      std::memcpy(pool.data() + at.scale_word, word, kIndexerScaleBytes);
    }
  }
  return pool;
}

}  // namespace dsv4::cuda
