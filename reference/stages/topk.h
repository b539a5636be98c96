#pragma once
// Top-k selection of compressed entries from indexer scores (docs/math.md "top-k").
// k = min(index_topk, n_keys) is one value for the whole call. Row t keeps its visible entries
// (score > -inf, the mask value; a +inf score ranks first, as torch.topk ranks it) ordered by score
// descending; ties are broken by the LOWER entry index first (the oracle's documented
// deterministic rule); picks beyond the visible entries are -1 (padding).
// Selected entries get `offset` added (the index space of sparse attention).
#include "reference/tensor.h"

namespace dsv4::ref {

// scores [s, n_keys] -> [s, k]. Throws std::invalid_argument for k outside [0, n_keys] and for a
// NaN score (naming its row and entry).
IndexMat topk_indices(const Mat& scores, int k, int32_t offset);

}  // namespace dsv4::ref
