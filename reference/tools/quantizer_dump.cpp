// dsv4-quantizer-dump: the oracle's roundings over a file of values, for cross-checks against other
// implementations (reference/tests/crosscheck_ml_dtypes.py compares it with ml_dtypes).
//
//   dsv4-quantizer-dump IN OUT
//       IN: n little-endian float64. OUT: n x 3 float64, per value
//       [bf16_round(fp32(x)), fp8_e4m3_round(x), fp4_e2m1_round(x)].
//   dsv4-quantizer-dump --fake-quant FORMAT ROW_LEN IN OUT
//       IN: rows x ROW_LEN float64. OUT: the same after fake_quant_row(FORMAT) on every row.
//       FORMAT is a BlockFormat name, e.g. e4m3/b64/ue8m0 (see --help).
#include <bit>
#include <fstream>
#include <iostream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/numerics/bf16.h"
#include "reference/numerics/block_quant.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"

using namespace dsv4::ref;

static_assert(std::endian::native == std::endian::little, "the file protocol is little-endian");

namespace {

const std::vector<BlockFormat> kFormats = {
    BlockFormat::fp8_kv(), BlockFormat::fp4_indexer(), BlockFormat::fp8_per_head(128),
    BlockFormat::mxfp4(),  BlockFormat::nvfp4(),       {Element::e4m3, 128, ScaleRule::fp32_amax},
};

std::string format_names() {
  std::string s;
  for (const BlockFormat& f : kFormats) s += (s.empty() ? "" : ", ") + f.name();
  return s;
}

BlockFormat format_by_name(const std::string& name) {
  for (const BlockFormat& f : kFormats)
    if (f.name() == name) return f;
  throw std::invalid_argument("unknown FORMAT '" + name + "': expected one of " + format_names());
}

std::vector<double> read_doubles(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::invalid_argument("cannot open IN file '" + path + "'");
  const std::streamsize bytes = in.tellg();
  if (bytes % 8 != 0)
    throw std::invalid_argument("IN file '" + path + "' has " + std::to_string(bytes) +
                                " bytes, expected a multiple of 8 (float64 values)");
  std::vector<double> v(static_cast<size_t>(bytes / 8));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), bytes);
  return v;
}

void write_doubles(const std::string& path, const std::vector<double>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 8));
  if (!out) throw std::runtime_error("cannot write OUT file '" + path + "'");
}

// x [n] -> [n, 3]
std::vector<double> element_roundings(const std::vector<double>& x) {
  std::vector<double> out;
  out.reserve(x.size() * 3);
  for (double v : x) {
    out.push_back(bf16_round(static_cast<float>(v)));
    out.push_back(fp8_e4m3_round(v));
    out.push_back(fp4_e2m1_round(v));
  }
  return out;
}

// x [rows, row_len] -> [rows, row_len]
std::vector<double> fake_quant_rows(const BlockFormat& f, size_t row_len, std::vector<double> x) {
  if (row_len == 0 || x.size() % row_len != 0)
    throw std::invalid_argument("IN holds " + std::to_string(x.size()) + " values, not a multiple of ROW_LEN " +
                                std::to_string(row_len));
  for (size_t r = 0; r < x.size() / row_len; ++r) fake_quant_row(f, std::span<double>(x).subspan(r * row_len, row_len));
  return x;
}

size_t parse_row_len(const std::string& s) {
  size_t used = 0;
  unsigned long v = 0;
  try {
    v = std::stoul(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || used == 0 || v == 0)
    throw std::invalid_argument("ROW_LEN must be a positive integer, got '" + s + "'");
  return v;
}

void usage(std::ostream& os) {
  os << "usage: dsv4-quantizer-dump IN OUT\n"
        "       dsv4-quantizer-dump --fake-quant FORMAT ROW_LEN IN OUT\n"
        "IN, OUT: little-endian float64. The first form writes [bf16, e4m3, e2m1] per value;\n"
        "the second fake-quantizes each row of ROW_LEN values. FORMAT: "
     << format_names() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
      usage(std::cout);
      return 0;
    }
    if (args.size() == 2) {
      write_doubles(args[1], element_roundings(read_doubles(args[0])));
      return 0;
    }
    if (args.size() == 5 && args[0] == "--fake-quant") {
      const BlockFormat f = format_by_name(args[1]);
      const size_t row_len = parse_row_len(args[2]);
      write_doubles(args[4], fake_quant_rows(f, row_len, read_doubles(args[3])));
      return 0;
    }
    usage(std::cerr);
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dsv4-quantizer-dump: " << e.what() << "\n";
    return 1;
  }
}
