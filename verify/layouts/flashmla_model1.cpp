// FlashMLA's MODEL1 cache (flashmla_model1.h) as an entry of the layout table.
#include "verify/layouts/flashmla_model1.h"

#include <stdexcept>
#include <string>

#include "verify/layouts/layout_table.h"

namespace dsv4::layouts {

namespace {
PagedLayout paged(const Model1Layout& layout) { return flashmla_model1(layout.page_size); }
}  // namespace

std::vector<uint8_t> encode_model1(const ref::Mat& rows, const Model1Layout& layout) {
  return encode_values(paged(layout), rows);
}

std::vector<uint8_t> quantize_model1(const ref::Mat& rows, const Model1Layout& layout) {
  const PagedLayout l = paged(layout);
  return encode(l, quantize(l, rows));
}

ref::Mat decode_model1(std::span<const uint8_t> pool, int64_t n_tokens, const Model1Layout& layout) {
  return decode(paged(layout), pool, n_tokens);
}

Eigen::RowVectorXd decode_model1_token(std::span<const uint8_t> pool, int64_t token, const Model1Layout& layout) {
  if (token < 0) throw std::invalid_argument("flashmla_model1: negative token index " + std::to_string(token));
  const int64_t page = token / layout.page_size;
  const int64_t page_bytes = layout.page_bytes();
  if (static_cast<int64_t>(pool.size()) < (page + 1) * page_bytes)
    throw std::invalid_argument("flashmla_model1: token " + std::to_string(token) + " is in page " +
                                std::to_string(page) + ", past the pool's " +
                                std::to_string(static_cast<int64_t>(pool.size()) / page_bytes) + " pages");
  // Decode the token's page alone, then take its slot.
  const ref::Mat rows =
      decode(paged(layout), pool.subspan(static_cast<size_t>(page * page_bytes), static_cast<size_t>(page_bytes)),
             layout.page_size);
  return rows.row(token % layout.page_size);
}

}  // namespace dsv4::layouts
