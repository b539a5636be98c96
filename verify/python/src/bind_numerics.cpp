// The number formats and block quantizers, returning values and raw bytes.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>

#include "reference/numerics/bf16.h"
#include "reference/numerics/block_quant.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"
#include "verify/python/src/arrays.h"

namespace dsv4::python {

using namespace nb::literals;

namespace {

std::vector<size_t> shape_sizes(const InAny& a) {
  std::vector<size_t> s;
  for (size_t i = 0; i < a.ndim(); ++i) s.push_back(a.shape(i));
  return s;
}

template <typename Code, typename F>
nb::tuple elementwise(const InAny& x, F&& f) {
  std::vector<double> values(x.size());
  std::vector<Code> codes(x.size());
  for (size_t i = 0; i < x.size(); ++i) f(x.data()[i], values[i], codes[i]);
  return nb::make_tuple(out(std::move(values), shape_sizes(x)), out(std::move(codes), shape_sizes(x)));
}

// 2^e -> e + 127 (UE8M0 / E8M0 byte).
uint8_t exponent_byte(double scale, int64_t row, int64_t block) {
  int e = 0;
  if (std::isnan(scale)) return 0xff;
  const double m = std::frexp(scale, &e);
  if (!(scale > 0) || m != 0.5 || e - 1 < -127 || e - 1 > 127)
    throw std::invalid_argument("row " + std::to_string(row) + ", block " + std::to_string(block) + ": scale " +
                                std::to_string(scale) + " is not a power of two 2^e, e in [-127, 127]");
  return static_cast<uint8_t>(e - 1 + 127);
}

}  // namespace

void bind_numerics(nb::module_& m) {
  m.def(
      "bf16",
      [](InAny x) {
        return elementwise<uint16_t>(x, [](double v, double& value, uint16_t& bits) {
          bits = ref::bf16_encode(static_cast<float>(v));
          value = ref::bf16_decode(bits);
        });
      },
      "x"_a, "bfloat16 through fp32, round-to-nearest-even: x (any shape) -> (values float64, raw uint16 bits)");
  m.def(
      "e4m3",
      [](InAny x) {
        return elementwise<uint8_t>(x, [](double v, double& value, uint8_t& code) {
          value = ref::fp8_e4m3_round(v);
          code = ref::fp8_e4m3_encode(v);
        });
      },
      "x"_a, "FP8 e4m3fn, RNE saturating to +-448 (CUDA satfinite), NaN -> 0x7f: x -> (values, raw uint8 codes)");
  m.def(
      "e2m1",
      [](InAny x) {
        return elementwise<uint8_t>(x, [](double v, double& value, uint8_t& code) {
          value = ref::fp4_e2m1_round(v);
          code = ref::fp4_e2m1_encode(v);
        });
      },
      "x"_a,
      "FP4 e2m1, RNE saturating to +-6, NaN -> +6: x -> (values, uint8 codes 0..15, one per element; pack_e2m1 packs "
      "pairs)");
  m.def(
      "pack_e2m1",
      [](nb::ndarray<const uint8_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> codes) {
        const size_t rows = codes.shape(0), n = codes.shape(1);
        if (n % 2) throw std::invalid_argument("pack_e2m1: " + std::to_string(n) + " codes per row, an odd count");
        std::vector<uint8_t> packed(rows * n / 2);
        for (size_t r = 0; r < rows; ++r)
          for (size_t i = 0; i < n; i += 2)
            packed[r * n / 2 + i / 2] = static_cast<uint8_t>((codes(r, i) & 0xf) | (codes(r, i + 1) & 0xf) << 4);
        return out(std::move(packed), {rows, n / 2});
      },
      "codes"_a, "e2m1 codes [rows, n] -> bytes [rows, n/2], element 2i in the low nibble");
  m.def(
      "ue8m0",
      [](InAny scales) {
        std::vector<uint8_t> bytes(scales.size());
        for (size_t i = 0; i < scales.size(); ++i)
          bytes[i] = exponent_byte(scales.data()[i], static_cast<int64_t>(i), 0);
        return out(std::move(bytes), shape_sizes(scales));
      },
      "scales"_a, "powers of two 2^e -> UE8M0 bytes e + 127 (NaN -> 0xff); anything else is refused");
  m.def("block_scale", &ref::block_scale, "format"_a, "amax"_a, "row_amax"_a = 0.0,
        "The stored scale of one block with amax (row_amax only for NVFP4).");
  m.def(
      "quantize_blocks",
      [](In2 x, const ref::BlockFormat& f) {
        const size_t rows = x.shape(0), n = x.shape(1);
        if (f.block <= 0 || n % static_cast<size_t>(f.block))
          throw std::invalid_argument("quantize_blocks: " + std::to_string(n) +
                                      " values per row is not a multiple of the block of " + f.name());
        const size_t nb_ = n / static_cast<size_t>(f.block);
        const bool fp4 = f.element == ref::Element::e2m1;
        const size_t scale_width = f.scale == ref::ScaleRule::fp32_amax ? 4 * nb_ : nb_;
        std::vector<double> values(rows * n), codes(rows * n), scales(rows * nb_), tensor(rows);
        std::vector<uint8_t> code_bytes(rows * (fp4 ? n / 2 : n), 0), scale_bytes(rows * scale_width, 0);
        for (size_t r = 0; r < rows; ++r) {
          const ref::QuantizedRow q = ref::quantize_row(f, std::span<const double>(x.data() + r * n, n));
          tensor[r] = q.tensor_scale;
          for (size_t i = 0; i < n; ++i) {
            const double s = q.scales[i / static_cast<size_t>(f.block)];
            codes[r * n + i] = q.q[i];
            values[r * n + i] = std::isnan(q.q[i]) ? q.q[i] : ref::dequantize(f, q.q[i], s, q.tensor_scale);
            if (fp4)
              code_bytes[r * n / 2 + i / 2] |= static_cast<uint8_t>(ref::fp4_e2m1_encode(q.q[i]) << (i % 2 * 4));
            else
              code_bytes[r * n + i] = ref::fp8_e4m3_encode(q.q[i]);
          }
          for (size_t b = 0; b < nb_; ++b) {
            const double s = q.scales[b];
            scales[r * nb_ + b] = s;
            switch (f.scale) {
              case ref::ScaleRule::ue8m0_ceil:
              case ref::ScaleRule::e8m0_floor:
                scale_bytes[r * nb_ + b] = exponent_byte(s, static_cast<int64_t>(r), static_cast<int64_t>(b));
                break;
              case ref::ScaleRule::nvfp4_e4m3: scale_bytes[r * nb_ + b] = ref::fp8_e4m3_encode(s); break;
              case ref::ScaleRule::fp32_amax: {
                const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(s));
                for (int k = 0; k < 4; ++k)
                  scale_bytes[r * scale_width + 4 * b + k] = static_cast<uint8_t>(bits >> (8 * k));
                break;
              }
            }
          }
        }
        nb::dict d;
        d["values"] = out(std::move(values), {rows, n});
        d["codes"] = out(std::move(codes), {rows, n});
        d["code_bytes"] = out(std::move(code_bytes), {rows, fp4 ? n / 2 : n});
        d["scales"] = out(std::move(scales), {rows, nb_});
        d["scale_bytes"] = out(std::move(scale_bytes), {rows, scale_width});
        d["tensor_scale"] = out(std::move(tensor), {rows});
        return d;
      },
      "x"_a, "format"_a,
      "Block quantization of each row: x [rows, n] -> {'values' (dequantized) [rows, n], 'codes' (element values) "
      "[rows, n], "
      "'code_bytes' uint8 [rows, n] (e4m3) or [rows, n/2] (e2m1 pairs, low nibble first), 'scales' [rows, n/block], "
      "'scale_bytes' uint8 (UE8M0/E8M0 exponent bytes, NVFP4 e4m3 bytes, or 4 little-endian bytes per fp32 scale), "
      "'tensor_scale' [rows] (NVFP4's g, else 1)}.");
}

}  // namespace dsv4::python
