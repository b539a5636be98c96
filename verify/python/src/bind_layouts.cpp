// verify/layouts in Python: the engine cache layouts, block tables, index and lse conventions.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "verify/layouts/block_table.h"
#include "verify/layouts/index_conventions.h"
#include "verify/layouts/layout_table.h"
#include "verify/layouts/lse_conventions.h"
#include "verify/layouts/paged_layout.h"
#include "verify/python/src/arrays.h"

namespace dsv4::python {

using namespace nb::literals;
using layouts::PagedLayout;

namespace {

std::span<const uint8_t> bytes_of(const InBytes& b) { return {b.data(), b.size()}; }

Out<uint8_t> out_bytes(std::vector<uint8_t> b) { return out(std::move(b)); }

nb::tuple out_lengths(layouts::LengthIndices l) {
  return nb::make_tuple(out(std::move(l.indices)), out(std::move(l.lengths)));
}

}  // namespace

void bind_layouts(nb::module_& m) {
  nb::enum_<layouts::ScaleEncoding>(m, "ScaleEncoding")
      .value("ue8m0", layouts::ScaleEncoding::ue8m0)
      .value("fp32", layouts::ScaleEncoding::fp32);
  nb::enum_<layouts::TokenPlacement>(m, "TokenPlacement")
      .value("interleaved", layouts::TokenPlacement::interleaved)
      .value("split", layouts::TokenPlacement::split);
  nb::class_<PagedLayout>(
      m, "PagedLayout",
      "A paged quantized cache layout (docs/engine-layouts.md). PagedLayout(name, page_size) takes an entry "
      "of the table (layout_names()); the fields describe a new one.")
      .def(nb::init<>())
      .def(
          "__init__",
          [](PagedLayout* self, const std::string& name, int page_size) {
            new (self) PagedLayout(layouts::layout_by_name(name, page_size));
          },
          "name"_a, "page_size"_a)
      .def_rw("name", &PagedLayout::name)
      .def_rw("element", &PagedLayout::element)
      .def_rw("quant_dims", &PagedLayout::quant_dims)
      .def_rw("scale_block", &PagedLayout::scale_block)
      .def_rw("scale_encoding", &PagedLayout::scale_encoding)
      .def_rw("scale_pad_bytes", &PagedLayout::scale_pad_bytes)
      .def_rw("bf16_dims", &PagedLayout::bf16_dims)
      .def_rw("placement", &PagedLayout::placement)
      .def_rw("page_align", &PagedLayout::page_align)
      .def_rw("page_size", &PagedLayout::page_size)
      .def_prop_ro("head_dim", &PagedLayout::head_dim)
      .def_prop_ro("token_bytes", &PagedLayout::token_bytes)
      .def_prop_ro("page_bytes", &PagedLayout::page_bytes)
      .def("pages_for", &PagedLayout::pages_for, "tokens"_a)
      .def("code_offset", &PagedLayout::code_offset, "token"_a)
      .def("scale_offset", &PagedLayout::scale_offset, "token"_a)
      .def("bf16_offset", &PagedLayout::bf16_offset, "token"_a)
      .def("validate", &PagedLayout::validate)
      .def("__repr__", [](const PagedLayout& l) {
        return "PagedLayout(" + l.name + ", page_size=" + std::to_string(l.page_size) + ", " +
               std::to_string(l.token_bytes()) + " B/token, " + std::to_string(l.page_bytes()) + " B/page)";
      });
  m.def("layout_names", &layouts::layout_names, "The entries of the layout table.");

  m.def(
      "encode_values",
      [](const PagedLayout& l, In2 rows) { return out_bytes(layouts::encode_values(l, to_mat(rows))); }, "layout"_a,
      "rows"_a,
      "Values on the layout's grid [n, head_dim] -> uint8 pool of pages_for(n) pages (token i at index i). Refuses a "
      "value "
      "off the grid, naming its row and dim.");
  m.def(
      "quantize_to_layout",
      [](const PagedLayout& l, In2 rows) { return out_bytes(layouts::encode(l, layouts::quantize(l, to_mat(rows)))); },
      "layout"_a, "rows"_a,
      "The cache writer: any values [n, head_dim] -> uint8 pool, quant dims quantized with DeepSeek's UE8M0 rule, "
      "bf16 dims rounded.");
  m.def(
      "quantize_to_layout_with",
      [](const PagedLayout& l, In2 rows, const ref::BlockFormat& f) {
        return out_bytes(layouts::encode(l, layouts::quantize(l, to_mat(rows), f)));
      },
      "layout"_a, "rows"_a, "format"_a,
      "As quantize_to_layout with another scale rule (e.g. fp32 scales: BlockFormat(Element.e4m3, 128, "
      "ScaleRule.fp32_amax)).");
  m.def(
      "encode_stored",
      [](const PagedLayout& l, In2 codes, In2 scales, In2 bf16) {
        layouts::StoredTokens t;
        const ref::Mat c = to_mat(codes), s = to_mat(scales);
        for (ref::Index r = 0; r < c.rows(); ++r)
          t.quant.push_back({std::vector<double>(c.row(r).data(), c.row(r).data() + c.cols()),
                             std::vector<double>(s.row(r).data(), s.row(r).data() + s.cols()), 1.0});
        t.bf16 = to_mat(bf16);
        return out_bytes(layouts::encode(l, t));
      },
      "layout"_a, "codes"_a, "scales"_a, "bf16"_a,
      "Stored form -> bytes: codes [n, quant_dims] (element values), scales [n, quant_dims/scale_block], "
      "bf16 [n, bf16_dims] (pass shape [n, 0] when the layout has none).");
  m.def(
      "decode",
      [](const PagedLayout& l, InBytes pool, int64_t n) { return out(layouts::decode(l, bytes_of(pool), n)); },
      "layout"_a, "pool"_a, "n_tokens"_a, "uint8 pool -> values [n, head_dim] of tokens 0..n-1");
  m.def(
      "decode_stored",
      [](const PagedLayout& l, InBytes pool, int64_t n) {
        const layouts::StoredTokens t = layouts::decode_stored(l, bytes_of(pool), n);
        ref::Mat codes(n, l.quant_dims), scales(n, l.scales_per_token());
        for (int64_t r = 0; r < n; ++r) {
          for (int d = 0; d < l.quant_dims; ++d)
            codes(r, d) = t.quant[static_cast<size_t>(r)].q[static_cast<size_t>(d)];
          for (int b = 0; b < l.scales_per_token(); ++b)
            scales(r, b) = t.quant[static_cast<size_t>(r)].scales[static_cast<size_t>(b)];
        }
        return nb::make_tuple(out(std::move(codes)), out(std::move(scales)), out(ref::Mat(t.bf16)));
      },
      "layout"_a, "pool"_a, "n_tokens"_a,
      "uint8 pool -> (codes [n, quant_dims], scales [n, blocks], bf16 [n, bf16_dims])");

  m.def(
      "to_pool_indices",
      [](InIndex2 logical, InIndex2 table, int page, int rows_per_sequence) {
        return out(layouts::to_pool_indices(to_index_mat(logical), to_index_mat(table), page, rows_per_sequence));
      },
      "logical"_a, "block_table"_a, "page_size"_a, "rows_per_sequence"_a = 1,
      "Per-sequence token indices [R, K] -> pool indices block_table[b, i // P] * P + i % P; -1 kept.");
  m.def(
      "to_logical_indices",
      [](InIndex2 pool, InIndex2 table, int page, int rows_per_sequence) {
        return out(layouts::to_logical_indices(to_index_mat(pool), to_index_mat(table), page, rows_per_sequence));
      },
      "pool"_a, "block_table"_a, "page_size"_a, "rows_per_sequence"_a = 1, "The inverse of to_pool_indices.");
  m.def(
      "scatter_pages",
      [](const PagedLayout& l, InBytes pages,
         nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> row,
         nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> pool) {
        layouts::scatter_pages(l, bytes_of(pages), {row.data(), row.size()}, {pool.data(), pool.size()});
      },
      "layout"_a, "sequence_pages"_a, "block_table_row"_a, "pool"_a,
      "Copies a sequence's pages (as encoded) into the pool (uint8, modified in place), page j at block_table_row[j].");
  m.def(
      "gather_pages",
      [](const PagedLayout& l, InBytes pool, nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> row,
         int64_t n_pages) {
        return out_bytes(layouts::gather_pages(l, bytes_of(pool), {row.data(), row.size()}, n_pages));
      },
      "layout"_a, "pool"_a, "block_table_row"_a, "n_pages"_a);

  m.def(
      "compact_with_lengths",
      [](InIndex2 idx, int align) { return out_lengths(layouts::compact_with_lengths(to_index_mat(idx), align)); },
      "indices"_a, "align"_a = 1,
      "-1 anywhere -> (valid entries first then -1 [R, ceil(K/align)*align], lengths [R]) (FlashMLA topk_length)");
  m.def(
      "pad_after_lengths",
      [](InIndex2 idx, std::vector<int32_t> lengths) {
        return out(layouts::pad_after_lengths({to_index_mat(idx), std::move(lengths)}));
      },
      "indices"_a, "lengths"_a, "Entries at or past each row's length become -1.");
  m.def(
      "combine_window_then_topk",
      [](InIndex2 w, InIndex2 t, int32_t offset, int align) {
        return out_lengths(layouts::combine_window_then_topk(to_index_mat(w), to_index_mat(t), offset, align));
      },
      "window"_a, "topk"_a, "topk_offset"_a, "align"_a = 128,
      "vLLM: valid window entries, then valid top-k entries + topk_offset, -1 padded to a multiple of 128 -> (indices, "
      "lengths)");
  m.def(
      "window_columns_then_topk",
      [](InIndex2 w, InIndex2 t, int cols) {
        return out_lengths(layouts::window_columns_then_topk(to_index_mat(w), to_index_mat(t), cols));
      },
      "window"_a, "topk"_a, "window_columns"_a = 128,
      "FlashInfer: window in columns [0, window_columns), top-k after -> (indices, lengths = window_columns + valid "
      "top-k)");
  m.def(
      "split_window_compressed",
      [](InIndex2 c, int width, int32_t offset) {
        layouts::SplitIndices s = layouts::split_window_compressed(to_index_mat(c), width, offset);
        return nb::make_tuple(out(std::move(s.window)), out(std::move(s.compressed)));
      },
      "concat"_a, "window_width"_a, "compressed_offset"_a,
      "The oracle's [window | compressed] list -> (window part, compressed part with the offset removed)");
  m.def(
      "ring_slots_to_positions",
      [](InIndex2 s, std::vector<int64_t> pos, int w) {
        return out(layouts::ring_slots_to_positions(to_index_mat(s), pos, w));
      },
      "slots"_a, "pos_of_row"_a, "window"_a);
  m.def(
      "positions_to_ring_slots",
      [](InIndex2 p, std::vector<int64_t> pos, int w) {
        return out(layouts::positions_to_ring_slots(to_index_mat(p), pos, w));
      },
      "positions"_a, "pos_of_row"_a, "window"_a);

  nb::class_<layouts::LseConvention>(m, "LseConvention",
                                     "LseConvention('flashmla' | 'vllm_reference' | 'flashinfer_reference')")
      .def(
          "__init__",
          [](layouts::LseConvention* self, const std::string& n) {
            new (self) layouts::LseConvention(layouts::LseConvention::by_name(n));
          },
          "name"_a)
      .def_static("names",
                  [] {
                    std::vector<std::string> n;
                    for (auto& c : layouts::LseConvention::all()) n.push_back(c.name);
                    return n;
                  })
      .def_ro("name", &layouts::LseConvention::name)
      .def_ro("base2", &layouts::LseConvention::base2)
      .def_ro("sink_included", &layouts::LseConvention::sink_included)
      .def_ro("empty_row", &layouts::LseConvention::empty_row);
  nb::implicitly_convertible<std::string, layouts::LseConvention>();
  m.def(
      "convert_lse",
      [](In2 lse, In1 sink, const layouts::LseConvention& from, const layouts::LseConvention& to) {
        return out(layouts::convert_lse(to_mat(lse), to_vec(sink), from, to));
      },
      "lse"_a, "sink"_a, "from_"_a, "to"_a, "lse [rows, H] with sink [H] (-inf: none) from one convention to another.");
}

}  // namespace dsv4::python
