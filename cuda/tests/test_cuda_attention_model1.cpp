// Host-only (CI): the attention kernels' reading of MODEL1 bytes (model1_codec.cuh, compiled here
// with g++) against the layout contract's own codec (verify/layouts/flashmla_model1.h): rows on the
// MODEL1 grid, encoded by encode_model1 at several page sizes, read back token by token the way
// the kernels read them (byte offsets, 8 codes + scale byte per 8 dims, rope dims as bf16), must
// give the rows and decode_model1_token's values exactly.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/attention/model1_codec.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/tests/attention_cases.h"
#include "verify/layouts/flashmla_model1.h"

using namespace dsv4;
using namespace dsv4::cuda;
using namespace dsv4::cuda::attention;

TEST_CASE("model1 bytes read as the kernels read them equal the encoded rows and decode_model1_token") {
  std::mt19937_64 gen(31);
  std::normal_distribution<double> g(0, 0.5);
  for (int page : {2, 53, 64, 256}) {
    CAPTURE(page);
    const int64_t tokens = 3 * int64_t{page};
    ref::Mat rows(tokens, 512);
    for (ref::Index i = 0; i < rows.size(); ++i) rows.data()[i] = g(gen);
    for (ref::Index i = 0; i < tokens; ++i)
      if (i % 5 == 2) rows.row(i).head(64).setZero();  // an all-zero block: the amax floor's scale
    testing::to_model1_grid(rows);
    const layouts::Model1Layout layout{page};
    const std::vector<uint8_t> pool = layouts::encode_model1(rows, layout);
    const int64_t page_bytes = model1_page_bytes(page);
    for (int64_t t = 0; t < tokens; ++t) {
      const uint8_t* data = pool.data() + model1_data_offset(t, page, page_bytes);
      const uint8_t* scales = pool.data() + model1_scale_offset(t, page, page_bytes);
      const Eigen::RowVectorXd contract = layouts::decode_model1_token(pool, t, layout);
      for (int chunk = 0; chunk < 56; ++chunk) {
        uint32_t lo, hi, out[4];
        std::memcpy(&lo, data + 8 * chunk, 4);
        std::memcpy(&hi, data + 8 * chunk + 4, 4);
        dequant8(lo, hi, scales[chunk / 8], out);
        for (int k = 0; k < 8; ++k) {
          const double v = bf16_value(static_cast<uint16_t>(out[k / 2] >> (16 * (k % 2))));
          REQUIRE_MESSAGE(v == rows(t, 8 * chunk + k), "token " << t << " dim " << 8 * chunk + k);
          REQUIRE(v == contract(8 * chunk + k));
        }
      }
      for (int k = 0; k < 64; ++k) {
        uint16_t code;
        std::memcpy(&code, data + 448 + 2 * k, 2);
        REQUIRE(bf16_value(code) == rows(t, 448 + k));
        REQUIRE(bf16_value(code) == contract(448 + k));
      }
    }
  }
}
