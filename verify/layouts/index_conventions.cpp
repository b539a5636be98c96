// Index-list conventions (index_conventions.h).
#include "verify/layouts/index_conventions.h"

#include <stdexcept>
#include <string>

namespace dsv4::layouts {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("index list: " + what); }

std::string at(ref::Index r, ref::Index c) { return "row " + std::to_string(r) + ", column " + std::to_string(c); }

ref::Index round_up(ref::Index n, int align) {
  if (align <= 0) fail("alignment must be positive, got " + std::to_string(align));
  return (n + align - 1) / align * align;
}

// Appends the valid (!= -1) entries of `from` row r, plus `offset`, to `to` row r from column c.
ref::Index append_valid(const ref::IndexMat& from, ref::Index r, int32_t offset, ref::IndexMat& to, ref::Index c) {
  for (ref::Index j = 0; j < from.cols(); ++j)
    if (from(r, j) != -1) to(r, c++) = from(r, j) + offset;
  return c;
}

ref::Index max_valid(const ref::IndexMat& m) {
  ref::Index best = 0;
  for (ref::Index r = 0; r < m.rows(); ++r) best = std::max<ref::Index>(best, (m.row(r).array() != -1).count());
  return best;
}

void check_same_rows(const ref::IndexMat& a, const ref::IndexMat& b) {
  if (a.rows() != b.rows()) fail("window has " + std::to_string(a.rows()) + " rows, top-k " + std::to_string(b.rows()));
}

}  // namespace

LengthIndices compact_with_lengths(const ref::IndexMat& indices, int align) {
  LengthIndices out;
  out.indices = ref::IndexMat::Constant(indices.rows(), round_up(indices.cols(), align), -1);
  for (ref::Index r = 0; r < indices.rows(); ++r)
    out.lengths.push_back(static_cast<int32_t>(append_valid(indices, r, 0, out.indices, 0)));
  return out;
}

ref::IndexMat pad_after_lengths(const LengthIndices& list) {
  if (static_cast<ref::Index>(list.lengths.size()) != list.indices.rows())
    fail(std::to_string(list.lengths.size()) + " lengths for " + std::to_string(list.indices.rows()) + " rows");
  ref::IndexMat out = list.indices;
  for (ref::Index r = 0; r < out.rows(); ++r) {
    const int32_t n = list.lengths[static_cast<size_t>(r)];
    if (n < 0 || n > out.cols())
      fail("row " + std::to_string(r) + ": length " + std::to_string(n) + " outside [0, " + std::to_string(out.cols()) +
           "]");
    for (ref::Index c = n; c < out.cols(); ++c) out(r, c) = -1;
  }
  return out;
}

LengthIndices combine_window_then_topk(const ref::IndexMat& window, const ref::IndexMat& topk, int32_t topk_offset,
                                       int align) {
  check_same_rows(window, topk);
  LengthIndices out;
  out.indices = ref::IndexMat::Constant(window.rows(), round_up(window.cols() + topk.cols(), align), -1);
  for (ref::Index r = 0; r < window.rows(); ++r) {
    const ref::Index c = append_valid(window, r, 0, out.indices, 0);
    out.lengths.push_back(static_cast<int32_t>(append_valid(topk, r, topk_offset, out.indices, c)));
  }
  return out;
}

LengthIndices window_columns_then_topk(const ref::IndexMat& window, const ref::IndexMat& topk, int window_columns) {
  check_same_rows(window, topk);
  if (max_valid(window) > window_columns)
    fail("a row has " + std::to_string(max_valid(window)) + " window entries, more than the " +
         std::to_string(window_columns) + " window columns");
  LengthIndices out;
  out.indices = ref::IndexMat::Constant(window.rows(), window_columns + topk.cols(), -1);
  for (ref::Index r = 0; r < window.rows(); ++r) {
    append_valid(window, r, 0, out.indices, 0);
    out.lengths.push_back(static_cast<int32_t>(append_valid(topk, r, 0, out.indices, window_columns)));
  }
  return out;
}

SplitIndices split_window_compressed(const ref::IndexMat& concat, int window_width, int32_t compressed_offset) {
  if (window_width < 0 || window_width > concat.cols())
    fail("window width " + std::to_string(window_width) + " outside [0, " + std::to_string(concat.cols()) + "]");
  SplitIndices out{concat.leftCols(window_width), concat.rightCols(concat.cols() - window_width)};
  for (ref::Index r = 0; r < out.compressed.rows(); ++r)
    for (ref::Index c = 0; c < out.compressed.cols(); ++c) {
      int32_t& i = out.compressed(r, c);
      if (i == -1) continue;
      if (i < compressed_offset)
        fail(at(r, window_width + c) + ": compressed index " + std::to_string(i) + " is below the offset " +
             std::to_string(compressed_offset));
      i -= compressed_offset;
    }
  return out;
}

ref::IndexMat ring_slots_to_positions(const ref::IndexMat& slots, const std::vector<int64_t>& pos_of_row, int window) {
  if (static_cast<ref::Index>(pos_of_row.size()) != slots.rows())
    fail(std::to_string(pos_of_row.size()) + " positions for " + std::to_string(slots.rows()) + " rows");
  ref::IndexMat out(slots.rows(), slots.cols());
  for (ref::Index r = 0; r < slots.rows(); ++r) {
    const int64_t pos = pos_of_row[static_cast<size_t>(r)];
    for (ref::Index c = 0; c < slots.cols(); ++c) {
      const int32_t s = slots(r, c);
      if (s == -1) {
        out(r, c) = -1;
        continue;
      }
      if (s < 0 || s >= window)
        fail(at(r, c) + ": slot " + std::to_string(s) + " outside the ring of " + std::to_string(window));
      const int64_t p = pos - ((pos - s) % window + window) % window;
      if (p < 0)
        fail(at(r, c) + ": slot " + std::to_string(s) + " holds no position yet at position " + std::to_string(pos));
      out(r, c) = static_cast<int32_t>(p);
    }
  }
  return out;
}

ref::IndexMat positions_to_ring_slots(const ref::IndexMat& positions, const std::vector<int64_t>& pos_of_row,
                                      int window) {
  if (static_cast<ref::Index>(pos_of_row.size()) != positions.rows())
    fail(std::to_string(pos_of_row.size()) + " positions for " + std::to_string(positions.rows()) + " rows");
  ref::IndexMat out(positions.rows(), positions.cols());
  for (ref::Index r = 0; r < positions.rows(); ++r) {
    const int64_t pos = pos_of_row[static_cast<size_t>(r)];
    for (ref::Index c = 0; c < positions.cols(); ++c) {
      const int32_t p = positions(r, c);
      if (p == -1) {
        out(r, c) = -1;
        continue;
      }
      if (p < 0 || p > pos || p <= pos - window)
        fail(at(r, c) + ": position " + std::to_string(p) + " is not in the ring at position " + std::to_string(pos) +
             " (window " + std::to_string(window) + ")");
      out(r, c) = static_cast<int32_t>(p % window);
    }
  }
  return out;
}

}  // namespace dsv4::layouts
