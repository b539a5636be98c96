// Top-k of the indexer scores (docs/math.md "indexer/topk").
#include "reference/stages/topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/parallel.h"

namespace dsv4::ref {

// scores [s, n_keys] -> [s, k]
IndexMat topk_indices(const Mat& scores, int k, int32_t offset) {
  if (k < 0 || k > scores.cols())
    throw std::invalid_argument("topk_indices: k = " + std::to_string(k) +
                                ", expected 0 <= k <= n_keys = " + std::to_string(scores.cols()));
  if (offset < 0 || static_cast<int64_t>(offset) + scores.cols() > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("topk_indices: offset " + std::to_string(offset) + " with " +
                                std::to_string(scores.cols()) + " entries leaves the int32 index range");
  // NaN is bad input (DeepSeek's scores never hold one); checked before the parallel loop.
  for (Index i = 0; i < scores.rows(); ++i)
    for (Index j = 0; j < scores.cols(); ++j)
      if (std::isnan(scores(i, j)))
        throw std::invalid_argument("topk_indices: score of row " + std::to_string(i) + ", entry " + std::to_string(j) +
                                    " is NaN");

  constexpr double kMasked = -std::numeric_limits<double>::infinity();
  IndexMat picks = IndexMat::Constant(scores.rows(), k, -1);
  parallel_for(scores.rows(), [&](int64_t i) {
    std::vector<int32_t> visible;
    for (Index j = 0; j < scores.cols(); ++j)
      if (scores(i, j) != kMasked) visible.push_back(static_cast<int32_t>(j));
    const auto ranks_before = [&](int32_t a, int32_t b) {
      return scores(i, a) > scores(i, b) || (scores(i, a) == scores(i, b) && a < b);
    };
    const size_t taken = std::min(visible.size(), static_cast<size_t>(k));
    std::partial_sort(visible.begin(), visible.begin() + static_cast<std::ptrdiff_t>(taken), visible.end(),
                      ranks_before);
    for (size_t c = 0; c < taken; ++c) picks(i, static_cast<Index>(c)) = visible[c] + offset;
  });
  return picks;
}

}  // namespace dsv4::ref
