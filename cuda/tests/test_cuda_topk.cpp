// GPU tests of the CUDA top-k and attention key lists (label gpu) against the oracle
// (reference/stages/topk.h, index_lists.h), each case a harness case (harness.h).
//
// What is asserted, per row: the picks equal the oracle's topk_indices exactly (the set and the
// order: score descending, the lower index first among equal scores), -1 after them. The oracle
// sees each row's candidates [0, length) and -inf past it; the kernel's buffer holds +inf past the
// length, which it must never read (a read would be picked first). NaN candidates are never picked
// (the oracle is given -inf in their place: it refuses NaN). Plus: ReLU-like plateaus of equal
// scores across the k-th boundary, +-inf and +-0, every dispatch boundary of v2 (the 32768-key
// slice, the cluster sizes), lengths 0 to 1M, k from 1 to 2048, reruns and batch permutations
// bitwise identical, and the key lists in the project's and the compact convention. v3's pieces each
// have a case that exercises one alone: the sort (at most k visible candidates: no select), the
// select (distinct scores: no ties), the share-out of ties across the CTAs and warps of a cluster
// (equal scores), and every cluster size it dispatches.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/indexer/oracle_mirror.h"
#include "cuda/tests/harness.h"
#include "cuda/topk/topk_api.h"
#include "cuda/topk/topk_keys.cuh"
#include "cuda/topk/topk_probes.h"
#include "cuda/topk/topk_v3_plan.h"
#include "reference/stages/index_lists.h"
#include "reference/stages/topk.h"
#include "verify/layouts/index_conventions.h"

using namespace dsv4;
using cuda::DeviceBuffer;
using cuda::GuardedBuffer;
using cuda::Variant;
using cuda::testing::Case;
using cuda::testing::CaseId;
using cuda::testing::TallyBook;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

enum class Scores { random, plateaus, specials };

const char* scores_name(Scores s) {
  return s == Scores::random ? "random" : s == Scores::plateaus ? "plateaus" : "specials";
}

// One row of `len` candidates.
std::vector<float> row_scores(int64_t len, Scores kind, std::mt19937_64& gen) {
  std::vector<float> x(static_cast<size_t>(len));
  std::normal_distribution<float> n(0, 1);
  std::uniform_int_distribution<int> pick(0, 99);
  for (float& v : x) {
    switch (kind) {
      case Scores::random: v = n(gen); break;
      case Scores::plateaus: {  // ReLU zeros and bf16-coarse values: many exact ties everywhere
        const int p = pick(gen);
        v = p < 60 ? 0.0f : (p < 65 ? -kInf : std::round(n(gen) * 4) / 4);
        break;
      }
      case Scores::specials: {
        const int p = pick(gen);
        v = p < 3    ? kInf
            : p < 10 ? -kInf
            : p < 14 ? std::numeric_limits<float>::quiet_NaN()
            : p < 20 ? -0.0f
            : p < 26 ? 0.0f
            : p < 30 ? std::numeric_limits<float>::denorm_min()
                     : n(gen);
        break;
      }
    }
  }
  return x;
}

// The oracle's picks of one row: its candidates, NaN as -inf, -inf padding up to k columns.
std::vector<int32_t> oracle_row(const std::vector<float>& x, int k, int32_t offset) {
  const int64_t n = std::max<int64_t>(static_cast<int64_t>(x.size()), k);
  ref::Mat m = ref::Mat::Constant(1, n, -std::numeric_limits<double>::infinity());
  for (size_t j = 0; j < x.size(); ++j) m(0, static_cast<ref::Index>(j)) = std::isnan(x[j]) ? -kInf : x[j];
  const ref::IndexMat picks = ref::topk_indices(m, k, offset);
  return std::vector<int32_t>(picks.data(), picks.data() + k);
}

struct Batch {
  std::vector<std::vector<float>> rows;
  int64_t stride = 0;
  std::vector<float> flat;  // [rows, stride]; +inf past each length (must never be read)
  std::vector<int32_t> lengths;
  int64_t max_length = 0;

  Batch(const std::vector<int64_t>& lens, Scores kind, std::mt19937_64& gen) {
    for (int64_t l : lens) {
      rows.push_back(row_scores(l, kind, gen));
      max_length = std::max(max_length, l);
      lengths.push_back(static_cast<int32_t>(l));
    }
    stride = (max_length + 3) / 4 * 4 + 4;  // room past the longest row for the canary
    flat.assign(static_cast<size_t>(stride) * rows.size(), kInf);
    for (size_t r = 0; r < rows.size(); ++r)
      std::copy(rows[r].begin(), rows[r].end(), flat.begin() + static_cast<int64_t>(r) * stride);
  }

  // Copies rows (after an edit) into flat.
  void store_rows() {
    for (size_t r = 0; r < rows.size(); ++r)
      std::copy(rows[r].begin(), rows[r].end(), flat.begin() + static_cast<int64_t>(r) * stride);
  }

  std::vector<int32_t> run(int k, int32_t offset, Variant v) const {
    const DeviceBuffer<float> d(flat);
    const DeviceBuffer<int32_t> len(lengths);
    GuardedBuffer<int32_t> out(rows.size() * static_cast<size_t>(k));
    out.poison(0x7A);
    cuda::topk(static_cast<int64_t>(rows.size()), d.get(), stride, len.get(), max_length, k, offset, out.get(), v);
    CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(out.damaged_guard_bytes() == 0);
    return out.download();
  }
};

// Rows whose picks differ from the oracle's, and picks outside [offset, offset + length) or -1.
struct Diff {
  int64_t rows = 0, bad_rows = 0, out_of_range = 0;
};
Diff compare(const Batch& b, const std::vector<int32_t>& got, int k, int32_t offset) {
  Diff d;
  for (size_t r = 0; r < b.rows.size(); ++r) {
    const std::vector<int32_t> want = oracle_row(b.rows[r], k, offset);
    const std::vector<int32_t> row(got.begin() + static_cast<int64_t>(r) * k,
                                   got.begin() + static_cast<int64_t>(r + 1) * k);
    ++d.rows;
    d.bad_rows += row != want;
    for (int32_t i : row) d.out_of_range += i != -1 && (i < offset || i >= offset + b.lengths[r]);
  }
  return d;
}

}  // namespace

TEST_CASE("top-k equals the oracle's picks and order at every length boundary and for ties, infinities and NaN") {
  TallyBook book;
  // Every v2 dispatch boundary (32768-key slices, cluster sizes 1..8 and the re-read path past 8),
  // around k, and a zero-length row.
  const std::vector<int64_t> lens{0,     1,     511,   512,   513,   1000,  8192,   8193,   16384,
                                  16385, 32767, 32768, 32769, 65536, 65537, 100000, 262144, 262145};
  for (Scores kind : {Scores::random, Scores::plateaus, Scores::specials})
    for (int k : {512, 1024})
      for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4, Variant::v5}) {
        const int32_t offset = 160;
        const auto c = Case::select(CaseId("topk")
                                        .with("lengths", lens)
                                        .with("scores", scores_name(kind))
                                        .with("k", k)
                                        .with("offset", offset)
                                        .with("variant", v));
        if (!c) continue;
        INFO(c->reproduce());
        std::mt19937_64 gen = c->rng();
        const Batch b(lens, kind, gen);
        const Diff d = compare(b, b.run(k, offset, v), k, offset);
        CHECK(d.bad_rows == 0);
        CHECK(d.out_of_range == 0);
        cuda::testing::Tally t;
        t.compared = d.rows;
        t.differing = d.bad_rows;
        book.at(v, std::string("rows, k ") + std::to_string(k)) += t;
      }
  MESSAGE(book.table());
}

TEST_CASE("top-k over a million candidates, small and large k") {
  for (int k : {1, 8, 2048})
    for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4, Variant::v5}) {
      const std::vector<int64_t> lens{1000000, 3, 2048};
      const auto c = Case::select(CaseId("topk_long").with("lengths", lens).with("k", k).with("variant", v));
      if (!c) continue;
      INFO(c->reproduce());
      std::mt19937_64 gen = c->rng();
      const Batch b(lens, Scores::plateaus, gen);
      const Diff d = compare(b, b.run(k, 0, v), k, 0);
      CHECK(d.bad_rows == 0);
      CHECK(d.out_of_range == 0);
    }
}

TEST_CASE("top-k picks are bitwise identical across reruns and batch permutations") {
  for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4, Variant::v5}) {
    const std::vector<int64_t> lens{40000, 700, 16384, 300000, 5};
    const auto c = Case::select(CaseId("topk_invariance").with("lengths", lens).with("variant", v));
    if (!c) continue;
    INFO(c->reproduce());
    std::mt19937_64 gen = c->rng();
    const Batch b(lens, Scores::plateaus, gen);
    const std::vector<int32_t> first = b.run(512, 0, v);
    int identical = 0;
    for (int r = 0; r < 19; ++r) identical += b.run(512, 0, v) == first;
    CHECK(identical == 19);
    // The rows reversed: each row's picks move with it, unchanged.
    std::vector<int64_t> rev(lens.rbegin(), lens.rend());
    Batch p = b;
    std::reverse(p.rows.begin(), p.rows.end());
    std::reverse(p.lengths.begin(), p.lengths.end());
    std::fill(p.flat.begin(), p.flat.end(), kInf);
    for (size_t r = 0; r < p.rows.size(); ++r)
      std::copy(p.rows[r].begin(), p.rows[r].end(), p.flat.begin() + static_cast<int64_t>(r) * p.stride);
    const std::vector<int32_t> permuted = p.run(512, 0, v);
    for (size_t r = 0; r < lens.size(); ++r)
      CHECK(std::equal(first.begin() + static_cast<int64_t>(r) * 512, first.begin() + static_cast<int64_t>(r + 1) * 512,
                       permuted.begin() + static_cast<int64_t>(lens.size() - 1 - r) * 512));
  }
}

// v3, one piece at a time. A Batch of rows built by `score(row, index)`.
Batch batch_of(const std::vector<int64_t>& lens, float (*score)(int64_t, int64_t)) {
  std::mt19937_64 unused(0);
  Batch b(lens, Scores::random, unused);
  for (size_t r = 0; r < lens.size(); ++r) {
    for (int64_t i = 0; i < lens[r]; ++i) b.rows[r][static_cast<size_t>(i)] = score(static_cast<int64_t>(r), i);
    std::copy(b.rows[r].begin(), b.rows[r].end(), b.flat.begin() + static_cast<int64_t>(r) * b.stride);
  }
  return b;
}

TEST_CASE("top-k v3, v4 and v5 pieces: the sort alone, the select alone, the tie share-out alone") {
  struct Piece {
    const char* name;
    std::vector<int64_t> lens;
    int k;
    float (*score)(int64_t, int64_t);
  };
  const std::vector<Piece> pieces{
      // At most k visible: every visible candidate picked, only the sort orders them (sizes 64 .. 2048,
      // the 1024-stride exchange inside a thread at 2048).
      {"sort_only",
       {1, 63, 64, 65, 1000, 1025, 2048, 5000},
       2048,
       [](int64_t r, int64_t i) {
         return i % 3 != 0 && r == 7 ? -kInf : static_cast<float>((i * 7919 + r) % 4099) - 2000.0f;
       }},
      // Distinct scores, no ties at the k-th key: the three digit passes alone decide.
      {"select_only",
       {16384, 16385, 70000, 262144},
       512,
       [](int64_t r, int64_t i) { return static_cast<float>(((i + r) * 2654435761LL) % 1000003) * 0.001f; }},
      // Every visible score equal: every pick is a tie, the lowest indices; the invisible prefix puts
      // the boundary inside a later CTA and warp of the cluster (a partial share).
      {"ties_after_prefix",
       {262144, 100000, 40000, 600},
       512,
       [](int64_t r, int64_t i) { return i < 9000 * r + 17 ? -kInf : 1.0f; }},
      // Ties in every CTA: the lower ranks take all theirs, one rank a part, the higher none (at 2.0
      // in the long row, at 0.0 in the short one, whose 2.0s are all taken).
      {"ties_every_cta",
       {262144, 50000},
       1024,
       [](int64_t, int64_t i) { return i % 97 == 3 ? 2.0f : (i % 5 == 1 ? 0.0f : -1.0f); }},
  };
  for (const Piece& piece : pieces)
    for (Variant v : {Variant::v3, Variant::v4, Variant::v5}) {
      const auto c =
          Case::select(CaseId("topk_v3_piece").with("piece", piece.name).with("k", piece.k).with("variant", v));
      if (!c) continue;
      INFO(c->reproduce());
      const Batch b = batch_of(piece.lens, piece.score);
      const Diff d = compare(b, b.run(piece.k, 3, v), piece.k, 3);
      CHECK(d.bad_rows == 0);
      CHECK(d.out_of_range == 0);
    }
}

TEST_CASE("top-k v3, v4 and v5 at every cluster size they dispatch (1 .. 16 CTAs, resident and re-read slices)") {
  // The cluster size follows the longest row: 16384 -> 1, 16385 -> 2, 49153 -> 4, 262144 -> 16
  // (8 where 16 is not schedulable: then 262145 re-reads its slices), 600000 re-reads them.
  for (int64_t longest : {16384, 16385, 49153, 131072, 262144, 262145, 600000})
    for (Scores kind : {Scores::random, Scores::plateaus})
      for (Variant v : {Variant::v3, Variant::v4, Variant::v5}) {
        const std::vector<int64_t> lens{longest, longest / 2 + 3, 0, 700, longest - 1};
        const auto c = Case::select(
            CaseId("topk_v3_cluster").with("lengths", lens).with("scores", scores_name(kind)).with("variant", v));
        if (!c) continue;
        INFO(c->reproduce());
        std::mt19937_64 gen = c->rng();
        const Batch b(lens, kind, gen);
        const Diff d = compare(b, b.run(512, 0, v), 512, 0);
        CHECK(d.bad_rows == 0);
        CHECK(d.out_of_range == 0);
      }
}

// v4's own paths (v5 has them too): the rank sort of up to 512 picks around its run boundaries (32
// picks a run, 16 runs; more picks take the network), and the picks taken from the keys collected at
// pass 1 where every CTA takes all of its ties at the k-th key or none (beside a partial share, which
// sweeps).
TEST_CASE("top-k v4 and v5: the rank sort at its run boundaries, ties at the k-th key taken from the collected keys") {
  // Exactly n visible candidates (every third index below 3n; the others NaN or -inf, and 5 more
  // invisible ones past them), on 13 plateau values: the order of equal scores is the index order.
  const std::vector<int64_t> visible{1, 2, 31, 32, 33, 63, 64, 65, 255, 256, 257, 511, 512, 513, 1000};
  std::vector<int64_t> lens;
  for (int64_t n : visible) lens.push_back(3 * n + 5);
  for (int k : {512, 1024})
    for (Variant v : {Variant::v4, Variant::v5}) {
      const auto c = Case::select(CaseId("topk_v4_rank_sort").with("visible", visible).with("k", k).with("variant", v));
      if (!c) continue;
      INFO(c->reproduce());
      std::mt19937_64 unused(0);
      Batch b(lens, Scores::random, unused);
      for (size_t r = 0; r < lens.size(); ++r)
        for (int64_t i = 0; i < lens[r]; ++i)
          b.rows[r][static_cast<size_t>(i)] = i % 3 == 1 && i < 3 * visible[r]
                                                  ? static_cast<float>((i * 7919) % 13) * 0.5f
                                                  : (i % 6 == 0 ? std::numeric_limits<float>::quiet_NaN() : -kInf);
      b.store_rows();
      const Diff d = compare(b, b.run(k, 11, v), k, 11);
      CHECK(d.bad_rows == 0);
      CHECK(d.out_of_range == 0);
    }
  // Rows of 262144 and 16384 candidates in one call (16 CTAs a row where 16-CTA clusters run, else
  // 8), and the 16384 row alone (one CTA): 0.5 everywhere but 1.0 at every `period`-th index from 7
  // (and at index 5 in `extra`). In the long row: period 512, k = 512 ones, every CTA takes all of
  // its ties; 256: 1024 ones, the lower half of the CTAs takes all, the upper none; extra: 513 ones,
  // one CTA takes part (the sweep); 32: the first CTA's ones decide alone; 100000: fewer ones than
  // k, the k-th key is the 0.5 plateau. The short row: the ones and a part of the 0.5 plateau.
  struct Ties {
    const char* name;
    int64_t period;
    bool extra;
  };
  for (const Ties& ties : {Ties{"all", 512, false}, Ties{"half", 256, false}, Ties{"partial", 512, true},
                           Ties{"short_row", 32, false}, Ties{"below_k", 100000, false}})
    for (Variant v : {Variant::v4, Variant::v5}) {
      const auto c = Case::select(CaseId("topk_v4_tie_lists").with("ties", ties.name).with("variant", v));
      if (!c) continue;
      INFO(c->reproduce());
      for (const std::vector<int64_t>& lens : {std::vector<int64_t>{262144, 16384}, std::vector<int64_t>{16384}}) {
        std::mt19937_64 unused(0);
        Batch b(lens, Scores::random, unused);
        for (std::vector<float>& row : b.rows)
          for (size_t i = 0; i < row.size(); ++i)
            row[i] = (static_cast<int64_t>(i) % ties.period == 7 || (ties.extra && i == 5)) ? 1.0f : 0.5f;
        b.store_rows();
        const Diff d = compare(b, b.run(512, 0, v), 512, 0);
        CHECK(d.bad_rows == 0);
        CHECK(d.out_of_range == 0);
      }
    }
}

// v5's own path: pass 2 skipped where the bin of the k-th key after pass 1 (its top 22 bits) holds
// at most 128 keys of the row, CTA 0 ranking them directly; past 128 pass 2 runs as v4's.
TEST_CASE("top-k v5: the k-th key's bin ranked directly up to 128 keys, pass 2 past them") {
  // k - 12 scores of 2.0 (above the bin) at even indices, `in_bin` scores of 1.0 plus 0, 1 or 2 ulps
  // (one 22-bit bin; equal keys among them, so the tie rule decides inside it) at odd ones, both
  // spread evenly over the row, 0.5 elsewhere: the bin holds the k-th key and 12 of its keys are
  // picked. 12: the bin taken whole; 127, 128: ranked directly; 129, 700: pass 2 (with partial tie
  // shares). Rows of 262144 and 16384 in one call (a 16- or 8-CTA cluster) and the 16384 row alone
  // (one CTA).
  for (int k : {512, 1024})
    for (int64_t in_bin : {12, 127, 128, 129, 700}) {
      const auto c = Case::select(CaseId("topk_v5_boundary").with("k", k).with("in_bin", in_bin));
      if (!c) continue;
      INFO(c->reproduce());
      for (const std::vector<int64_t>& lens : {std::vector<int64_t>{262144, 16384}, std::vector<int64_t>{16384}}) {
        std::mt19937_64 unused(0);
        Batch b(lens, Scores::random, unused);
        for (std::vector<float>& row : b.rows) {
          const int64_t n = static_cast<int64_t>(row.size()), above = k - 12;
          std::fill(row.begin(), row.end(), 0.5f);
          for (int64_t j = 0; j < above; ++j) row[static_cast<size_t>(j * (n / above) / 2 * 2)] = 2.0f;
          for (int64_t j = 0; j < in_bin; ++j)
            row[static_cast<size_t>(j * (n / in_bin) / 2 * 2 + 1)] = 1.0f + static_cast<float>((j * 7) % 3) * 0x1p-23f;
        }
        b.store_rows();
        const Diff d = compare(b, b.run(k, 5, Variant::v5), k, 5);
        CHECK(d.bad_rows == 0);
        CHECK(d.out_of_range == 0);
      }
    }
}

// Where v5's time goes (docs/cuda-indexer.md, "Top-k v5 phase stamps"): the benchmark's two k-512
// shapes (TopK/v5/b1/n262144/k512, b128/n16384/k512) on its kind of scores (uniform in [-1, 1), from
// the case's generator), 2 warm-up calls, then 20 calls of the stamped instantiation one at a time.
// A table a shape, a row a stamp reached: "cycles" = clock64 since the CTA's previous stamp reached
// (median over CTAs and calls; "max CTA": the median over calls of the slowest CTA's), "since
// entry" = clock64 since the CTA's own entry, "ns" = %globaltimer since the call's earliest entry
// (median; "max CTA" as above). Checked: the stamped picks are production v5's, every CTA stamps
// entry and exit, each CTA's stamps increase in kernel order.
TEST_CASE("top-k v5 phase stamps: a table of its phases at 262144 x 1 and 16384 x 128, k 512") {
  namespace tp = cuda::topk_probes;
  constexpr int kWarmup = 2, kCalls = 20, k = 512;
  for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{1, 262144}, std::pair<int64_t, int64_t>{128, 16384}}) {
    const auto c = Case::select(CaseId("topk_v5_stamps").with("rows", rows).with("n", n));
    if (!c) continue;
    INFO(c->reproduce());
    std::mt19937_64 gen = c->rng();
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> host(static_cast<size_t>(rows * n));
    for (float& x : host) x = u(gen);
    const DeviceBuffer<float> scores(host);
    const DeviceBuffer<int32_t> lens(std::vector<int32_t>(static_cast<size_t>(rows), static_cast<int32_t>(n)));
    DeviceBuffer<int32_t> out(static_cast<size_t>(rows * k)), want(static_cast<size_t>(rows * k));
    cuda::topk(rows, scores.get(), n, lens.get(), n, k, 0, want.get(), Variant::v5);
    // stamps[call][cta][s][clock64, globaltimer]
    std::vector<std::vector<uint64_t>> calls;
    int cluster = 0;
    for (int call = 0; call < kWarmup + kCalls; ++call) {
      DeviceBuffer<uint64_t> stamps(static_cast<size_t>(rows) * 16 * tp::kV5Stamps * 2);  // cluster <= 16
      CUDA_CHECK(cudaMemset(stamps.get(), 0, stamps.size() * sizeof(uint64_t)));
      cluster = tp::topk_v5_stamped(rows, scores.get(), n, lens.get(), n, k, out.get(), stamps.get());
      CUDA_CHECK(cudaDeviceSynchronize());
      if (call >= kWarmup) calls.push_back(stamps.download());
    }
    CHECK(out.download() == want.download());
    const int64_t ctas = rows * cluster;
    auto at = [&](const std::vector<uint64_t>& st, int64_t b, int s, int which) {
      return st[static_cast<size_t>((b * tp::kV5Stamps + s) * 2 + which)];
    };
    auto median = [](std::vector<double> v) {
      if (v.empty()) return 0.0;
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    // Per stamp: samples over CTAs and calls, and per call the slowest CTA's.
    std::vector<std::vector<double>> d_cyc(tp::kV5Stamps), entry_cyc(tp::kV5Stamps), ns(tp::kV5Stamps),
        max_d_cyc(tp::kV5Stamps), max_ns(tp::kV5Stamps);
    std::vector<double> kernel_cyc, kernel_ns;
    double ns_step = 0;  // the smallest nonzero globaltimer step between two stamps of a CTA
    int64_t bad_order = 0, missing = 0;
    for (const std::vector<uint64_t>& st : calls) {
      uint64_t start = ~0ull, end = 0;
      for (int64_t b = 0; b < ctas; ++b) {
        missing += at(st, b, tp::kEntry, 0) == 0 || at(st, b, tp::kExit, 0) == 0;
        start = std::min(start, at(st, b, tp::kEntry, 1));
        end = std::max(end, at(st, b, tp::kExit, 1));
      }
      kernel_ns.push_back(static_cast<double>(end - start));
      std::vector<double> call_max_d(tp::kV5Stamps, -1), call_max_ns(tp::kV5Stamps, -1);
      for (int64_t b = 0; b < ctas; ++b) {
        int prev = -1;
        for (int s = 0; s < tp::kV5Stamps; ++s) {
          if (at(st, b, s, 0) == 0) continue;
          const double ns_since = static_cast<double>(at(st, b, s, 1) - start);
          if (prev >= 0) {
            bad_order += at(st, b, s, 0) < at(st, b, prev, 0);
            const double d = static_cast<double>(at(st, b, s, 0) - at(st, b, prev, 0));
            d_cyc[s].push_back(d);
            call_max_d[s] = std::max(call_max_d[s], d);
            const double step = static_cast<double>(at(st, b, s, 1) - at(st, b, prev, 1));
            if (step > 0 && (ns_step == 0 || step < ns_step)) ns_step = step;
          }
          entry_cyc[s].push_back(static_cast<double>(at(st, b, s, 0) - at(st, b, tp::kEntry, 0)));
          ns[s].push_back(ns_since);
          call_max_ns[s] = std::max(call_max_ns[s], ns_since);
          prev = s;
        }
        if (b % cluster == 0)
          kernel_cyc.push_back(static_cast<double>(at(st, b, tp::kExit, 0) - at(st, b, tp::kEntry, 0)));
      }
      for (int s = 0; s < tp::kV5Stamps; ++s) {
        if (call_max_d[s] >= 0) max_d_cyc[s].push_back(call_max_d[s]);
        if (call_max_ns[s] >= 0) max_ns[s].push_back(call_max_ns[s]);
      }
    }
    CHECK(missing == 0);
    CHECK(bad_order == 0);
    std::string table = "top-k v5 phase stamps, " + std::to_string(n) + " x " + std::to_string(rows) + ", k " +
                        std::to_string(k) + ": " + std::to_string(cluster) + " CTAs a row, " + std::to_string(kCalls) +
                        " calls; kernel (CTA 0 entry to exit) " + std::to_string(median(kernel_cyc)) +
                        " cycles; call span (earliest entry to last exit) " + std::to_string(median(kernel_ns)) +
                        " ns; globaltimer step >= " + std::to_string(ns_step) + " ns\n";
    char line[256];
    std::snprintf(line, sizeof(line), "%-16s %6s %9s %9s %11s %9s %9s\n", "stamp", "CTAs", "cycles", "max CTA",
                  "since entry", "ns", "max CTA");
    table += line;
    for (int s = 0; s < tp::kV5Stamps; ++s) {
      if (ns[s].empty()) continue;
      std::snprintf(line, sizeof(line), "%-16s %6zu %9.0f %9.0f %11.0f %9.0f %9.0f\n", tp::v5_stamp_name(s),
                    ns[s].size() / calls.size(), median(d_cyc[s]), median(max_d_cyc[s]), median(entry_cyc[s]),
                    median(ns[s]), median(max_ns[s]));
      table += line;
    }
    MESSAGE(table);
  }
}

TEST_CASE("the oracle-typed topk_indices wrapper equals the oracle") {
  const auto c = Case::select(CaseId("topk_wrapper").with("rows", 33).with("n", 300));
  if (!c) return;
  INFO(c->reproduce());
  std::mt19937_64 gen = c->rng();
  ref::Mat scores(33, 300);
  std::normal_distribution<double> n(0, 1);
  for (ref::Index i = 0; i < scores.rows(); ++i)
    for (ref::Index j = 0; j < scores.cols(); ++j)
      scores(i, j) =
          j < (i * 9) ? std::round(n(gen) * 2) / 2 : -std::numeric_limits<double>::infinity();  // causal-like
  for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4, Variant::v5})
    CHECK(cuda::topk_indices(scores, 64, 128, v) == ref::topk_indices(scores, 64, 128));
}

TEST_CASE("attention key lists: the project's convention is the oracle's, the compact one drops -1 and pads to 128") {
  struct Call {
    int64_t start_pos, seqlen;
  };
  const std::vector<Call> calls{{0, 5}, {0, 300}, {1000, 1}, {50, 1}, {130, 70}, {7, 3}};
  for (const Call& call : calls) {
    const auto c =
        Case::select(CaseId("attention_indices").with("start_pos", call.start_pos).with("seqlen", call.seqlen));
    if (!c) continue;
    INFO(c->reproduce());
    std::mt19937_64 gen = c->rng();
    const int window = 128;
    const ref::IndexSpace space = ref::IndexSpace::for_call(call.start_pos, call.seqlen, window);
    const int k = 16;
    ref::IndexMat topk(call.seqlen, k);
    std::uniform_int_distribution<int> pick(-1, 40);
    for (ref::Index i = 0; i < topk.size(); ++i) topk.data()[i] = pick(gen);
    const ref::IndexMat want = ref::concat_indices(ref::window_indices(space), topk);
    CHECK(cuda::attention_indices(space, topk) == want);
    CHECK(cuda::attention_indices(space, ref::IndexMat(call.seqlen, 0)) == ref::window_indices(space));
    // Compact: verify/layouts' combine_window_then_topk (vLLM's combine_topk_swa_indices), the picks
    // already in the attention's index space (topk_offset 0).
    const cuda::IndexSpaceDesc sp{static_cast<int>(space.kind), space.start_pos, space.seqlen, space.window};
    const int64_t width = cuda::compact_width(sp, k);
    const layouts::LengthIndices ref_compact = layouts::combine_window_then_topk(ref::window_indices(space), topk, 0);
    REQUIRE(ref_compact.indices.cols() == width);
    const DeviceBuffer<int32_t> dtopk(std::vector<int32_t>(topk.data(), topk.data() + topk.size()));
    DeviceBuffer<int32_t> out(static_cast<size_t>(call.seqlen * width)), lengths(static_cast<size_t>(call.seqlen));
    cuda::attention_indices_compact(sp, dtopk.get(), k, out.get(), lengths.get());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<int32_t> got = out.download(), got_len = lengths.download();
    int64_t bad = 0;
    for (int64_t i = 0; i < call.seqlen; ++i) {
      bad += got_len[static_cast<size_t>(i)] != ref_compact.lengths[static_cast<size_t>(i)];
      for (int64_t j = 0; j < width; ++j) bad += got[static_cast<size_t>(i * width + j)] != ref_compact.indices(i, j);
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("sanitizer sweep: one small call of every top-k kernel and version") {
  const auto c = Case::select(CaseId("topk_sanitizer_sweep"));
  if (!c) return;
  INFO(c->reproduce());
  std::mt19937_64 gen = c->rng();
  for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4, Variant::v5}) {
    const Batch small(std::vector<int64_t>{0, 3, 700, 40000}, Scores::specials,
                      gen);  // 40000: a 2- (v2) or 3-CTA (v3) cluster
    const Diff d = compare(small, small.run(64, 7, v), 64, 7);
    CHECK(d.bad_rows == 0);
  }
}

// v5's shared-memory paths for the sanitizers, each taken by construction rather than by the seed:
// a row of 3 candidates (every one picked after pass 0), a row whose k-th key's bin after pass 1
// holds 20 keys spread over every CTA (ranked directly by CTA 0), and a row of ties at the k-th key
// that start in its second half (pass 2, then a CTA taking a part of its ties), in a 3-CTA launch
// (longest row 40000) and a one-CTA launch (9000). The 3-CTA launch meets every pass's hand-out of
// warp 0's digit to its CTA followed by the pass-1 collection and the partial tie share, which
// write shared words without a barrier after it (racecheck's finding of 2026-12-02: a load of the
// hand-out that read one of those words; docs/cuda-indexer.md, "Top-k v5").
TEST_CASE("sanitizer sweep: top-k v5's take-all, boundary-bin and partial-tie paths in 3-CTA and one-CTA launches") {
  constexpr int k = 64;
  for (int64_t longest : {40000, 9000}) {
    const auto c = Case::select(CaseId("topk_v5_sanitizer_paths").with("longest", longest).with("k", k));
    if (!c) continue;
    INFO(c->reproduce());
    const std::vector<int64_t> lens{3, longest, longest, 0};
    std::mt19937_64 unused(0);
    Batch b(lens, Scores::random, unused);
    // Row 1: k - 12 scores of 2.0 at even indices, 20 of 1.0 plus 0-2 ulps at odd ones, 0.5 elsewhere.
    std::vector<float>& bin_row = b.rows[1];
    std::fill(bin_row.begin(), bin_row.end(), 0.5f);
    for (int64_t j = 0; j < k - 12; ++j) bin_row[static_cast<size_t>(j * (longest / (k - 12)) / 2 * 2)] = 2.0f;
    for (int64_t j = 0; j < 20; ++j)
      bin_row[static_cast<size_t>(j * (longest / 20) / 2 * 2 + 1)] = 1.0f + static_cast<float>(j % 3) * 0x1p-23f;
    // Row 2: 0.5, and 1.0 at every 31st index of the second half (> 128 of them, > k).
    std::vector<float>& tie_row = b.rows[2];
    std::fill(tie_row.begin(), tie_row.end(), 0.5f);
    for (int64_t i = longest / 2; i < longest; i += 31) tie_row[static_cast<size_t>(i)] = 1.0f;
    b.store_rows();
    // The construction holds: the k-th key's 22-bit bin (pass 1's digits) holds <= 128 keys in row 1
    // and > 128 in row 2, where some CTA's slice holds ties of the k-th key both taken and not.
    auto kth_bin = [&](const std::vector<float>& row) {
      std::vector<uint32_t> keys(row.size());
      std::transform(row.begin(), row.end(), keys.begin(), cuda::order_key);
      std::vector<uint32_t> sorted = keys;
      std::sort(sorted.begin(), sorted.end(), std::greater<>());
      const uint32_t kth = sorted[k - 1];
      return std::count_if(keys.begin(), keys.end(), [&](uint32_t key) { return key >> 10 == kth >> 10; });
    };
    CHECK(kth_bin(bin_row) == 20);
    CHECK(kth_bin(tie_row) > 128);
    const int ctas = cuda::topk_v3_plan::cluster_size(longest, 8);
    REQUIRE(ctas == cuda::topk_v3_plan::cluster_size(longest, 16));
    bool partial = false;
    for (int r = 0; r < ctas; ++r) {
      const cuda::topk_v3_plan::Slice s = cuda::topk_v3_plan::slice_of(longest, ctas, r);
      const int64_t before = (std::max(s.lo, longest / 2) - longest / 2 + 30) / 31;  // ties at lower indices
      const int64_t mine = (std::max(s.hi, longest / 2) - longest / 2 + 30) / 31 - before;
      partial |= before < k && k < before + mine;
    }
    CHECK(partial);
    const Diff d = compare(b, b.run(k, 7, Variant::v5), k, 7);
    CHECK(d.bad_rows == 0);
    CHECK(d.out_of_range == 0);
  }
}

TEST_CASE("bad arguments throw before anything is launched (top-k)") {
  DeviceBuffer<float> s(16);
  DeviceBuffer<int32_t> len(std::vector<int32_t>{4}), out(16);
  CHECK_THROWS_AS(cuda::topk(1, s.get(), 16, len.get(), 16, 4097, 0, out.get(), Variant::v1), std::invalid_argument);
  CHECK_THROWS_AS(cuda::topk(1, s.get(), 8, len.get(), 16, 4, 0, out.get(), Variant::v1), std::invalid_argument);
  CHECK_THROWS_AS(cuda::topk(1, s.get(), 16, len.get(), 16, 4, 0x7ffffff8, out.get(), Variant::v2),
                  std::invalid_argument);
  CHECK_THROWS_AS(cuda::topk(1, s.get(), 16, len.get(), 16, 4, 0, out.get(), static_cast<Variant>(7)),
                  std::invalid_argument);
  CHECK_THROWS_AS(cuda::attention_indices({1, 0, 1, 128}, nullptr, 0, out.get()),
                  std::invalid_argument);  // decode at 0
}
