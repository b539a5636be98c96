// The KV cache layouts: the ring (DeepSeek's) and the paged (production engines') layout hold the
// same values, checked against a plain model of what was written; reads outside the window and
// writes past max_seq_len throw; the paged pool really is scrambled.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

#include "reference/kv_cache.h"
#include "reference/tests/layer_test_support.h"

namespace dsv4::ref {
namespace {

using testing::bitwise_equal;
using testing::same_state;

// Small dims, enough positions for several pages of 128 and a C128 entry per page.
ModelConfig cache_config() {
  ModelConfig c;
  c.name = "kv-test";
  c.window_size = 16;
  c.head_dim = 8;
  c.index_head_dim = 4;
  c.max_seq_len = 512;
  return c;
}

Eigen::RowVectorXd random_row(int n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-4.0, 4.0);
  Eigen::RowVectorXd r(n);
  for (Index i = 0; i < n; ++i) r[i] = u(rng);
  return r;
}

void randomize(CompressorState& s, std::mt19937_64& rng) {
  for (Index i = 0; i < s.kv.rows(); ++i) {
    s.kv.row(i) = random_row(static_cast<int>(s.kv.cols()), rng);
    s.score.row(i) = random_row(static_cast<int>(s.score.cols()), rng);
  }
}

// What a cache must return, kept the plainest way: every write in a map.
struct Written {
  std::map<int64_t, Eigen::RowVectorXd> window;                 // position -> kv
  std::map<std::pair<int, int64_t>, Eigen::RowVectorXd> entry;  // (kind, j) -> entry
  int64_t length = 0;
};

// Writes the same random sequence history to every cache: windows position by position in calls of
// random length (only the last W of a call, as the layer does), the entries each position completes,
// and random compressor states after each call. Sequences are interleaved call by call.
std::vector<Written> write_history(const std::vector<KvCache*>& caches, const ModelConfig& cfg, int ratio, int batch,
                                   int64_t length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Written> written(batch);
  std::vector<int64_t> done(batch, 0);
  const int W = cfg.window_size;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int seq = 0; seq < batch; ++seq) {
      if (done[seq] >= length) continue;
      progress = true;
      const int64_t s = std::min<int64_t>(length - done[seq], 1 + static_cast<int64_t>(rng() % 40));
      for (int64_t pos = std::max(done[seq], done[seq] + s - W); pos < done[seq] + s; ++pos) {
        const Eigen::RowVectorXd kv = random_row(cfg.head_dim, rng);
        for (KvCache* c : caches) c->write_window(seq, pos, kv);
        written[seq].window[pos] = kv;
      }
      for (int64_t pos = done[seq]; ratio != 0 && pos < done[seq] + s; ++pos) {
        if ((pos + 1) % ratio != 0) continue;
        const int64_t j = (pos + 1) / ratio - 1;
        for (EntryKind kind : {EntryKind::main, EntryKind::indexer}) {
          if (kind == EntryKind::indexer && ratio != 4) continue;
          const Eigen::RowVectorXd e = random_row(kind == EntryKind::main ? cfg.head_dim : cfg.index_head_dim, rng);
          for (KvCache* c : caches) c->write_entry(seq, kind, j, e);
          written[seq].entry[{static_cast<int>(kind), j}] = e;
        }
      }
      for (EntryKind kind : {EntryKind::main, EntryKind::indexer}) {
        if (ratio == 0 || (kind == EntryKind::indexer && ratio != 4)) continue;
        CompressorState st = caches.front()->compressor_state(seq, kind);
        randomize(st, rng);
        for (KvCache* c : caches) c->compressor_state(seq, kind) = st;
      }
      done[seq] += s;
      written[seq].length = done[seq];
    }
  }
  return written;
}

// The cache holds exactly what was written: the last W positions, the ring in slot order (0 where no
// position reached), every entry, and the states equal to the reference cache's.
void check_reads(const KvCache& cache, const KvCache& reference, const std::vector<Written>& written,
                 const ModelConfig& cfg, int ratio) {
  const int W = cfg.window_size;
  for (int seq = 0; seq < static_cast<int>(written.size()); ++seq) {
    const Written& w = written[seq];
    CHECK(cache.length(seq) == w.length);
    Mat ring = Mat::Zero(W, cfg.head_dim);
    for (const auto& [pos, kv] : w.window) ring.row(pos % W) = kv;  // later positions overwrite earlier ones
    CHECK(bitwise_equal(cache.ring(seq, w.length), ring));
    for (int64_t pos = std::max<int64_t>(0, w.length - W); pos < w.length; ++pos)
      CHECK(bitwise_equal(cache.window_row(seq, pos), w.window.at(pos)));
    for (EntryKind kind : {EntryKind::main, EntryKind::indexer}) {
      if (ratio == 0 || (kind == EntryKind::indexer && ratio != 4)) continue;
      const int64_t n = w.length / ratio;
      const Mat e = cache.entries(seq, kind, n);
      REQUIRE(e.rows() == n);
      for (int64_t j = 0; j < n; ++j) CHECK(bitwise_equal(e.row(j), w.entry.at({static_cast<int>(kind), j})));
      CHECK(same_state(cache.compressor_state(seq, kind), reference.compressor_state(seq, kind)));
    }
  }
}

TEST_CASE("ring and paged caches read back bitwise what was written for ratios 0 4 128") {
  const ModelConfig cfg = cache_config();
  const int batch = 3;
  for (int ratio : {0, 4, 128}) {
    CAPTURE(ratio);
    auto ring = make_ring_cache(cfg, ratio, batch);
    auto paged = make_paged_cache(cfg, ratio, batch, 12345);
    CHECK(ring->batch() == batch);
    CHECK(paged->compress_ratio() == ratio);
    // The full max_seq_len: every page of every sequence is used, so the pool must be big enough.
    const auto written = write_history({ring.get(), paged.get()}, cfg, ratio, batch, cfg.max_seq_len, 7 + ratio);
    check_reads(*ring, *ring, written, cfg, ratio);
    check_reads(*paged, *ring, written, cfg, ratio);
  }
}

TEST_CASE("a fresh or reset sequence has zero ring slots and no entries and fresh compressor states") {
  const ModelConfig cfg = cache_config();
  for (auto make : {+[](const ModelConfig& c) { return make_ring_cache(c, 4, 2); },
                    +[](const ModelConfig& c) { return make_paged_cache(c, 4, 2, 99); }}) {
    auto cache = make(cfg);
    const CompressorState fresh_main = CompressorState::fresh(4, cfg.head_dim);
    CHECK(cache->length(1) == 0);
    CHECK(bitwise_equal(cache->ring(1, 0), Mat::Zero(cfg.window_size, cfg.head_dim)));
    CHECK(cache->entries(1, EntryKind::main, 0).rows() == 0);
    CHECK(same_state(cache->compressor_state(1, EntryKind::main), fresh_main));

    write_history({cache.get()}, cfg, 4, 2, 200, 3);
    const Mat other_ring = cache->ring(0, 200);
    const Mat other_entries = cache->entries(0, EntryKind::indexer, 50);
    cache->reset(1);
    CHECK(cache->length(1) == 0);
    CHECK(bitwise_equal(cache->ring(1, 0), Mat::Zero(cfg.window_size, cfg.head_dim)));
    CHECK_THROWS_AS(cache->entries(1, EntryKind::main, 1), std::out_of_range);
    CHECK(same_state(cache->compressor_state(1, EntryKind::main), fresh_main));
    CHECK(same_state(cache->compressor_state(1, EntryKind::indexer), CompressorState::fresh(4, cfg.index_head_dim)));
    // The other sequence is untouched.
    CHECK(bitwise_equal(cache->ring(0, 200), other_ring));
    CHECK(bitwise_equal(cache->entries(0, EntryKind::indexer, 50), other_entries));
    // The reset sequence can be written again (the paged pool got its pages back).
    write_history({cache.get()}, cfg, 4, 2, cfg.max_seq_len, 4);
  }
}

TEST_CASE("window_row only reads the last W written positions") {
  const ModelConfig cfg = cache_config();
  const int W = cfg.window_size;
  for (bool paged : {false, true}) {
    CAPTURE(paged);
    auto cache = paged ? make_paged_cache(cfg, 128, 2, 5) : make_ring_cache(cfg, 128, 2);
    std::mt19937_64 rng(1);
    for (int64_t pos = 0; pos < 41; ++pos) cache->write_window(0, pos, random_row(cfg.head_dim, rng));
    CHECK_NOTHROW(cache->window_row(0, 41 - W));
    CHECK_NOTHROW(cache->window_row(0, 40));
    CHECK_THROWS_AS(cache->window_row(0, 40 - W), std::out_of_range);  // overwritten by position 40
    CHECK_THROWS_AS(cache->window_row(0, 41), std::out_of_range);      // not written yet
    CHECK_THROWS_AS(cache->window_row(0, -1), std::out_of_range);
    CHECK_THROWS_AS(cache->window_row(1, 0), std::out_of_range);  // other sequence: nothing written
    CHECK_THROWS_AS(cache->window_row(2, 0), std::out_of_range);  // outside the batch
    // A gap: position 45 written after 40 leaves 41..44 unheld even though they are within W of 45.
    cache->write_window(0, 45, random_row(cfg.head_dim, rng));
    CHECK_THROWS_AS(cache->window_row(0, 43), std::out_of_range);
    CHECK_NOTHROW(cache->window_row(0, 30));
    // ring(seq, end) is the ring after exactly [0, end).
    CHECK_NOTHROW(cache->ring(0, 46));
    CHECK_THROWS_AS(cache->ring(0, 41), std::out_of_range);
  }
}

TEST_CASE("writes past max_seq_len and malformed writes throw") {
  const ModelConfig cfg = cache_config();
  const Eigen::RowVectorXd kv = Eigen::RowVectorXd::Ones(cfg.head_dim);
  const Eigen::RowVectorXd ik = Eigen::RowVectorXd::Ones(cfg.index_head_dim);
  for (bool paged : {false, true}) {
    CAPTURE(paged);
    for (int ratio : {0, 4, 128}) {
      CAPTURE(ratio);
      auto cache = paged ? make_paged_cache(cfg, ratio, 1, 5) : make_ring_cache(cfg, ratio, 1);
      CHECK_NOTHROW(cache->write_window(0, cfg.max_seq_len - 1, kv));
      CHECK_THROWS_AS(cache->write_window(0, cfg.max_seq_len, kv), std::out_of_range);
      CHECK_THROWS_AS(cache->write_window(0, -1, kv), std::out_of_range);
      CHECK_THROWS_AS(cache->write_window(0, 0, ik), std::invalid_argument);  // wrong width
      if (ratio == 0) {
        CHECK_THROWS_AS(cache->write_entry(0, EntryKind::main, 0, kv), std::invalid_argument);
        CHECK_THROWS_AS(cache->compressor_state(0, EntryKind::main), std::invalid_argument);
        continue;
      }
      const int64_t capacity = cfg.max_seq_len / ratio;
      CHECK_NOTHROW(cache->write_entry(0, EntryKind::main, capacity - 1, kv));
      CHECK_THROWS_AS(cache->write_entry(0, EntryKind::main, capacity, kv), std::out_of_range);
      CHECK_THROWS_AS(cache->write_entry(0, EntryKind::main, 0, ik), std::invalid_argument);
      CHECK_THROWS_AS(cache->entries(0, EntryKind::main, capacity + 1), std::out_of_range);
      if (ratio == 4) {
        CHECK_NOTHROW(cache->write_entry(0, EntryKind::indexer, capacity - 1, ik));
        CHECK_THROWS_AS(cache->write_entry(0, EntryKind::indexer, capacity, ik), std::out_of_range);
      } else {
        CHECK_THROWS_AS(cache->write_entry(0, EntryKind::indexer, 0, ik), std::invalid_argument);
      }
    }
  }
  CHECK_THROWS_AS(make_ring_cache(cfg, 8, 1), std::invalid_argument);
  CHECK_THROWS_AS(make_paged_cache(cfg, 4, 0, 1), std::invalid_argument);
}

TEST_CASE("the paged pool is handed out in a scrambled order and reads are still right") {
  const ModelConfig cfg = cache_config();  // 4 pages of 128 positions per sequence
  const int batch = 4;
  auto ring = make_ring_cache(cfg, 4, batch);
  auto paged = make_paged_cache(cfg, 4, batch, 2024);
  const auto written = write_history({ring.get(), paged.get()}, cfg, 4, batch, 300, 11);
  check_reads(*paged, *ring, written, cfg, 4);

  // The pool pages in use. 300 positions complete entries 0..74, on a sequence's pages 0..2;
  // page 3 is never touched. 12 of the 16 pool pages are handed out; in allocation order they
  // would be pool pages 0..11.
  const auto pages_in_use = [&](const KvCache& cache) {
    std::set<int> pages;
    for (int seq = 0; seq < batch; ++seq) {
      const std::vector<int> table = paged_block_table(cache, seq);
      REQUIRE(table.size() == 4);
      CHECK(table[3] == -1);
      for (int i = 0; i < 3; ++i) {
        CHECK(table[i] >= 0);
        CHECK(table[i] < batch * 4);
        pages.insert(table[i]);
      }
    }
    CHECK(pages.size() == 3 * batch);  // no page shared
    return pages;
  };
  std::set<int> first_twelve;
  for (int i = 0; i < 12; ++i) first_twelve.insert(i);
  CHECK(pages_in_use(*paged) != first_twelve);

  std::set<int> slots;
  bool slot_moved = false;
  for (int seq = 0; seq < batch; ++seq) {
    slots.insert(paged_state_slot(*paged, seq));
    slot_moved = slot_moved || paged_state_slot(*paged, seq) != seq;
  }
  CHECK(slots == std::set<int>{0, 1, 2, 3});
  CHECK(slot_moved);

  // Seed 0: pages in allocation order, slots in sequence order.
  auto plain = make_paged_cache(cfg, 4, batch, 0);
  write_history({plain.get()}, cfg, 4, batch, 300, 11);
  CHECK(pages_in_use(*plain) == first_twelve);
  CHECK(paged_state_slot(*plain, 1) == 1);
  auto single = make_paged_cache(cfg, 128, 2, 0);
  write_history({single.get()}, cfg, 128, 1, 512, 2);
  CHECK(paged_block_table(*single, 0) == std::vector<int>{0, 1, 2, 3});
  CHECK_THROWS_AS(paged_block_table(*ring, 0), std::invalid_argument);
}

}  // namespace
}  // namespace dsv4::ref
