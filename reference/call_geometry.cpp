#include "reference/call_geometry.h"

#include <algorithm>

namespace dsv4::ref {

int64_t CallGeometry::indexer_topk() const { return std::min<int64_t>(cfg->index_topk, indexer_visible()); }

int64_t CallGeometry::window_width() const {
  return start_pos == 0 ? std::min<int64_t>(seqlen, cfg->window_size) : cfg->window_size;
}

int64_t CallGeometry::compressed_width() const {
  switch (ratio) {
    case 4: return indexer_topk();
    case 128: return entries_after(128);
    default: return 0;
  }
}

int64_t CallGeometry::kv_rows() const { return index_space().rows(ratio == 0 ? 0 : entries_after(ratio)); }

}  // namespace dsv4::ref
