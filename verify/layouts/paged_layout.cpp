// Encoding and decoding of the paged quantized caches described in paged_layout.h.
#include "verify/layouts/paged_layout.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "reference/numerics/bf16.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"
#include "reference/numerics/storage.h"

namespace dsv4::layouts {

namespace {

std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

const char* element_name(ref::Element e) { return e == ref::Element::e4m3 ? "e4m3" : "e2m1"; }

[[noreturn]] void fail(const PagedLayout& l, const std::string& what) {
  throw std::invalid_argument(l.name + ": " + what);
}

// A code is on the element grid: the element rounding leaves it unchanged (which also refuses
// magnitudes above the saturation value and infinities). e4m3 has a NaN code, e2m1 none.
bool on_element_grid(ref::Element e, double code) {
  if (std::isnan(code)) return e == ref::Element::e4m3;
  return ref::round_element(e, code) == code;
}

bool is_bf16(double v) {
  if (std::isnan(v)) return true;
  const float f = static_cast<float>(v);
  return static_cast<double>(f) == v && ref::bf16_round(f) == f;
}

// 2^e with e in [-127, 127] -> e + 127; NaN -> 0xff (UE8M0's NaN); anything else is refused.
bool ue8m0_byte(double scale, uint8_t* byte) {
  if (std::isnan(scale)) {
    *byte = 0xff;
    return true;
  }
  if (!(scale > 0) || std::isinf(scale)) return false;
  int e = 0;
  const double m = std::frexp(scale, &e);  // scale = m * 2^e, m in [0.5, 1)
  if (m != 0.5 || e - 1 < -127 || e - 1 > 127) return false;
  *byte = static_cast<uint8_t>(e - 1 + 127);
  return true;
}

double ue8m0_value(uint8_t byte) { return byte == 0xff ? std::nan("") : std::ldexp(1.0, int{byte} - 127); }

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

uint8_t element_code(ref::Element e, double code) {
  return e == ref::Element::e4m3 ? ref::fp8_e4m3_encode(code) : ref::fp4_e2m1_encode(code);
}

void check_width(const PagedLayout& l, const ref::Mat& rows) {
  if (rows.cols() != l.head_dim())
    fail(l, "rows have " + std::to_string(rows.cols()) + " dims, the layout holds " + std::to_string(l.head_dim()) +
                " (" + std::to_string(l.quant_dims) + " " + element_name(l.element) + " + " +
                std::to_string(l.bf16_dims) + " bf16)");
}

}  // namespace

void PagedLayout::validate() const {
  auto bad = [&](const std::string& why) { fail(*this, "invalid layout: " + why); };
  if (quant_dims <= 0) bad("quant_dims must be positive, got " + std::to_string(quant_dims));
  if (scale_block <= 0 || quant_dims % scale_block != 0)
    bad("scale_block " + std::to_string(scale_block) + " must divide quant_dims " + std::to_string(quant_dims));
  if (element == ref::Element::e2m1 && quant_dims % 2 != 0) bad("e2m1 codes pack in pairs: quant_dims must be even");
  if (bf16_dims < 0 || scale_pad_bytes < 0) bad("bf16_dims and scale_pad_bytes must not be negative");
  if (page_size <= 0) bad("page_size must be positive, got " + std::to_string(page_size));
  if (page_align <= 0) bad("page_align must be positive, got " + std::to_string(page_align));
}

std::vector<uint8_t> encode(const PagedLayout& l, const StoredTokens& tokens) {
  l.validate();
  const int64_t n = tokens.size();
  if (l.bf16_dims > 0 && (tokens.bf16.rows() != n || tokens.bf16.cols() != l.bf16_dims))
    fail(l, "bf16 dims are [" + std::to_string(tokens.bf16.rows()) + ", " + std::to_string(tokens.bf16.cols()) +
                "], expected [" + std::to_string(n) + ", " + std::to_string(l.bf16_dims) + "]");
  std::vector<uint8_t> pool(static_cast<size_t>(l.pool_bytes(l.pages_for(n))), 0);
  for (int64_t t = 0; t < n; ++t) {
    const ref::QuantizedRow& row = tokens.quant[static_cast<size_t>(t)];
    const std::string who = "token " + std::to_string(t);
    if (static_cast<int>(row.q.size()) != l.quant_dims || static_cast<int>(row.scales.size()) != l.scales_per_token())
      fail(l, who + " has " + std::to_string(row.q.size()) + " codes and " + std::to_string(row.scales.size()) +
                  " scales, expected " + std::to_string(l.quant_dims) + " and " + std::to_string(l.scales_per_token()));
    if (row.tensor_scale != 1.0)
      fail(l, who + " has a tensor scale " + num(row.tensor_scale) + " the layout cannot hold");
    uint8_t* codes = pool.data() + l.code_offset(t);
    for (int d = 0; d < l.quant_dims; ++d) {
      const double c = row.q[static_cast<size_t>(d)];
      if (!on_element_grid(l.element, c))
        fail(l, who + ", dim " + std::to_string(d) + ": code " + num(c) + " is not an " + element_name(l.element) +
                    " value");
      const uint8_t code = element_code(l.element, c);
      if (l.element == ref::Element::e4m3)
        codes[d] = code;
      else
        codes[d / 2] = static_cast<uint8_t>(codes[d / 2] | (d % 2 == 0 ? code : code << 4));
    }
    uint8_t* scales = pool.data() + l.scale_offset(t);
    for (int b = 0; b < l.scales_per_token(); ++b) {
      const double s = row.scales[static_cast<size_t>(b)];
      if (l.scale_encoding == ScaleEncoding::ue8m0) {
        if (!ue8m0_byte(s, scales + b))
          fail(l, who + ", block " + std::to_string(b) + ": scale " + num(s) +
                      " is not a power of two 2^e, e in [-127, 127]");
      } else {
        const float f = static_cast<float>(s);
        if (!std::isnan(s) && static_cast<double>(f) != s)
          fail(l, who + ", block " + std::to_string(b) + ": scale " + num(s) + " is not an fp32 value");
        put_u32(scales + 4 * b, std::bit_cast<uint32_t>(f));
      }
    }
    uint8_t* tail = pool.data() + l.bf16_offset(t);
    for (int d = 0; d < l.bf16_dims; ++d) {
      const double v = tokens.bf16(t, d);
      if (!is_bf16(v))
        fail(l, who + ", dim " + std::to_string(l.quant_dims + d) + ": value " + num(v) + " is not a bf16");
      put_u16(tail + 2 * d, ref::bf16_encode(static_cast<float>(v)));
    }
  }
  return pool;
}

StoredTokens decode_stored(const PagedLayout& l, std::span<const uint8_t> pool, int64_t n) {
  l.validate();
  if (n < 0) fail(l, "negative token count " + std::to_string(n));
  const int64_t need = l.pool_bytes(l.pages_for(n));
  if (static_cast<int64_t>(pool.size()) < need)
    fail(l, "pool of " + std::to_string(pool.size()) + " bytes is too short for " + std::to_string(n) + " tokens (" +
                std::to_string(l.pages_for(n)) + " pages of " + std::to_string(l.page_bytes()) +
                " bytes = " + std::to_string(need) + ")");
  StoredTokens out;
  out.quant.resize(static_cast<size_t>(n));
  out.bf16.resize(n, l.bf16_dims);
  for (int64_t t = 0; t < n; ++t) {
    ref::QuantizedRow& row = out.quant[static_cast<size_t>(t)];
    row.q.resize(static_cast<size_t>(l.quant_dims));
    row.scales.resize(static_cast<size_t>(l.scales_per_token()));
    const uint8_t* codes = pool.data() + l.code_offset(t);
    for (int d = 0; d < l.quant_dims; ++d)
      row.q[static_cast<size_t>(d)] =
          l.element == ref::Element::e4m3
              ? ref::fp8_e4m3_decode(codes[d])
              : ref::fp4_e2m1_decode(static_cast<uint8_t>((codes[d / 2] >> (d % 2 * 4)) & 0xf));
    const uint8_t* scales = pool.data() + l.scale_offset(t);
    for (int b = 0; b < l.scales_per_token(); ++b)
      row.scales[static_cast<size_t>(b)] = l.scale_encoding == ScaleEncoding::ue8m0
                                               ? ue8m0_value(scales[b])
                                               : static_cast<double>(std::bit_cast<float>(get_u32(scales + 4 * b)));
    const uint8_t* tail = pool.data() + l.bf16_offset(t);
    for (int d = 0; d < l.bf16_dims; ++d) out.bf16(t, d) = ref::bf16_decode(get_u16(tail + 2 * d));
  }
  return out;
}

ref::Mat decode(const PagedLayout& l, std::span<const uint8_t> pool, int64_t n) {
  const StoredTokens s = decode_stored(l, pool, n);
  ref::Mat out(n, l.head_dim());
  for (int64_t t = 0; t < n; ++t) {
    const ref::QuantizedRow& row = s.quant[static_cast<size_t>(t)];
    for (int d = 0; d < l.quant_dims; ++d) {
      const double q = row.q[static_cast<size_t>(d)], sc = row.scales[static_cast<size_t>(d / l.scale_block)];
      // Exact in double (a short code times a 24-bit scale); an fp32 scale's product is then
      // rounded to fp32, as a torch dequantization (code.float() * scale) computes it.
      const double v = q * sc;
      out(t, d) = l.scale_encoding == ScaleEncoding::ue8m0 ? v : static_cast<double>(static_cast<float>(v));
    }
    for (int d = 0; d < l.bf16_dims; ++d) out(t, l.quant_dims + d) = s.bf16(t, d);
  }
  return out;
}

StoredTokens from_values(const PagedLayout& l, const ref::Mat& rows) {
  l.validate();
  check_width(l, rows);
  const ref::BlockFormat format = l.canonical_format();
  StoredTokens out;
  out.quant.resize(static_cast<size_t>(rows.rows()));
  out.bf16.resize(rows.rows(), l.bf16_dims);
  for (ref::Index r = 0; r < rows.rows(); ++r) {
    ref::QuantizedRow& row = out.quant[static_cast<size_t>(r)];
    row.q.resize(static_cast<size_t>(l.quant_dims));
    for (int b = 0; b < l.scales_per_token(); ++b) {
      const int first = b * l.scale_block, last = first + l.scale_block - 1;
      double amax = 0;
      for (int d = first; d <= last; ++d) {
        const double v = rows(r, d);
        const bool refused = std::isinf(v) || (std::isnan(v) && l.element == ref::Element::e2m1);
        if (refused)
          fail(l, "row " + std::to_string(r) + ", dim " + std::to_string(d) + ": value " + num(v) + " has no " +
                      element_name(l.element) + " code");
        if (std::fabs(v) > amax) amax = std::fabs(v);  // NaN never compares greater
      }
      const double scale = ref::block_scale(format, amax, 0);
      row.scales.push_back(scale);
      for (int d = first; d <= last; ++d) {
        const double v = rows(r, d), code = v / scale;  // exact: the scale is a power of two
        if (!on_element_grid(l.element, code))
          fail(l, "row " + std::to_string(r) + ", dim " + std::to_string(d) + ": value " + num(v) +
                      " is off the grid: dims " + std::to_string(first) + ".." + std::to_string(last) + " have amax " +
                      num(amax) + ", so scale 2^" + std::to_string(std::ilogb(scale)) + ", and " + num(v) +
                      " / scale = " + num(code) + " is not an " + element_name(l.element) + " value");
        row.q[static_cast<size_t>(d)] = code;
      }
    }
    for (int d = 0; d < l.bf16_dims; ++d) {
      const double v = rows(r, l.quant_dims + d);
      if (!is_bf16(v))
        fail(l, "row " + std::to_string(r) + ", dim " + std::to_string(l.quant_dims + d) + ": value " + num(v) +
                    " is off the grid: not a bf16");
      out.bf16(r, d) = v;
    }
  }
  return out;
}

std::vector<uint8_t> encode_values(const PagedLayout& l, const ref::Mat& rows) {
  return encode(l, from_values(l, rows));
}

StoredTokens quantize(const PagedLayout& l, const ref::Mat& rows, const ref::BlockFormat& format) {
  l.validate();
  check_width(l, rows);
  if (format.element != l.element || format.block != l.scale_block)
    fail(l, "format " + format.name() + " does not fit the layout's " + element_name(l.element) +
                " codes in blocks of " + std::to_string(l.scale_block));
  if (format.scale == ref::ScaleRule::nvfp4_e4m3)
    fail(l, "format " + format.name() + " needs a tensor scale the layout cannot hold");
  StoredTokens out;
  out.quant.reserve(static_cast<size_t>(rows.rows()));
  out.bf16.resize(rows.rows(), l.bf16_dims);
  std::vector<double> nope(static_cast<size_t>(l.quant_dims));
  for (ref::Index r = 0; r < rows.rows(); ++r) {
    for (int d = 0; d < l.quant_dims; ++d) nope[static_cast<size_t>(d)] = rows(r, d);
    out.quant.push_back(ref::quantize_row(format, nope));
    for (int d = 0; d < l.bf16_dims; ++d) out.bf16(r, d) = ref::round_to(ref::Storage::bf16, rows(r, l.quant_dims + d));
  }
  return out;
}

StoredTokens quantize(const PagedLayout& l, const ref::Mat& rows) { return quantize(l, rows, l.canonical_format()); }

}  // namespace dsv4::layouts
