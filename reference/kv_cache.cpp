// The KV cache model: the checks every layout shares (CheckedCache), then DeepSeek's ring layout
// and the paged layout of production engines. Both hold the same values; only where they live
// differs.
#include "reference/kv_cache.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

namespace dsv4::ref {
namespace {

// A page covers this many token positions: lcm(4, 128), so a page holds whole C4 and C128 blocks.
constexpr int kPagePositions = 128;

std::string kind_name(EntryKind kind) { return kind == EntryKind::main ? "main" : "indexer"; }

// The bookkeeping and argument checks of every layout. The public calls check, then hand the
// storage work to the layout (the store_*/load_* hooks).
class CheckedCache : public KvCache {
 public:
  CheckedCache(const ModelConfig& cfg, int compress_ratio, int batch)
      : ratio_(compress_ratio),
        batch_(batch),
        window_(cfg.window_size),
        max_seq_len_(cfg.max_seq_len),
        head_dim_(cfg.head_dim),
        index_head_dim_(cfg.index_head_dim),
        books_(batch > 0 ? batch : 0, Book(cfg.window_size)) {
    if (compress_ratio != 0 && compress_ratio != 4 && compress_ratio != 128)
      throw std::invalid_argument("KV cache: compress_ratio must be 0, 4 or 128, got " +
                                  std::to_string(compress_ratio));
    if (batch < 1) throw std::invalid_argument("KV cache: batch must be >= 1, got " + std::to_string(batch));
    if (cfg.window_size < 1 || cfg.max_seq_len < 1 || cfg.head_dim < 1)
      throw std::invalid_argument("KV cache: window_size, max_seq_len and head_dim must be >= 1 (config '" + cfg.name +
                                  "')");
    if (compress_ratio == 4 && cfg.index_head_dim < 1)
      throw std::invalid_argument("KV cache: ratio 4 needs index_head_dim >= 1 (config '" + cfg.name + "')");
  }

  int batch() const final { return batch_; }
  int compress_ratio() const final { return ratio_; }

  int64_t length(int seq) const final { return book(seq).length; }

  void reset(int seq) final {
    book(seq) = Book(window_);
    clear_sequence(seq);
  }

  void write_window(int seq, int64_t pos, const Eigen::RowVectorXd& kv) final {
    Book& b = book(seq);
    if (pos < 0 || pos >= max_seq_len_)
      throw std::out_of_range("KV cache write_window: position " + std::to_string(pos) +
                              " is outside [0, max_seq_len = " + std::to_string(max_seq_len_) + ")");
    check_width("write_window", kv.size(), head_dim_);
    const int slot = static_cast<int>(pos % window_);
    store_window(seq, slot, kv);
    b.slot_position[slot] = pos;
    b.length = std::max(b.length, pos + 1);
  }

  Eigen::RowVectorXd window_row(int seq, int64_t pos) const final {
    const Book& b = book(seq);
    const int64_t oldest = std::max<int64_t>(0, b.length - window_);
    const bool held = pos >= oldest && pos < b.length && b.slot_position[pos % window_] == pos;
    if (!held)
      throw std::out_of_range("KV cache window_row: position " + std::to_string(pos) + " of sequence " +
                              std::to_string(seq) + " is not held; the window holds the last " +
                              std::to_string(window_) + " written positions, [" + std::to_string(oldest) + ", " +
                              std::to_string(b.length) + ")");
    return load_window(seq, static_cast<int>(pos % window_));
  }

  Mat ring(int seq, int64_t end) const final {
    if (end != book(seq).length)
      throw std::out_of_range("KV cache ring: asked for the ring after positions [0, " + std::to_string(end) +
                              ") of sequence " + std::to_string(seq) + ", but it holds [0, " +
                              std::to_string(book(seq).length) + ")");
    return load_ring(seq);
  }

  void write_entry(int seq, EntryKind kind, int64_t j, const Eigen::RowVectorXd& entry) final {
    Book& b = book(seq);
    check_kind("write_entry", kind);
    if (j < 0 || j >= entry_capacity())
      throw std::out_of_range("KV cache write_entry: " + kind_name(kind) + " entry " + std::to_string(j) +
                              " is outside [0, max_seq_len / ratio = " + std::to_string(entry_capacity()) +
                              ") (max_seq_len " + std::to_string(max_seq_len_) + ")");
    check_width("write_entry", entry.size(), entry_width(kind));
    store_entry(seq, kind, j, entry);
    int64_t& n = b.entries[static_cast<int>(kind)];
    n = std::max(n, j + 1);
  }

  Mat entries(int seq, EntryKind kind, int64_t count) const final {
    const Book& b = book(seq);
    check_kind("entries", kind);
    const int64_t written = b.entries[static_cast<int>(kind)];
    if (count < 0 || count > written)
      throw std::out_of_range("KV cache entries: asked for " + std::to_string(count) + " " + kind_name(kind) +
                              " entries of sequence " + std::to_string(seq) + ", " + std::to_string(written) +
                              " were written");
    Mat out(count, entry_width(kind));
    for (int64_t j = 0; j < count; ++j) out.row(j) = load_entry(seq, kind, j);
    return out;
  }

  void restore_window(int seq, int64_t end, const Mat& ring) final {
    Book& b = book(seq);
    if (end < 0 || end > max_seq_len_)
      throw std::out_of_range("KV cache restore_window: end " + std::to_string(end) +
                              " is outside [0, max_seq_len = " + std::to_string(max_seq_len_) + "]");
    check_width("restore_window (ring rows)", ring.rows(), window_);
    check_width("restore_window", ring.cols(), head_dim_);
    for (int slot = 0; slot < window_; ++slot) {
      // The latest position before `end` that lands in this slot, -1 when none does.
      const int64_t last = end - 1;
      const int64_t position = last - ((last - slot) % window_ + window_) % window_;
      store_window(seq, slot, ring.row(slot));
      b.slot_position[slot] = position >= 0 ? position : -1;
    }
    b.length = end;
  }

  void restore_entries(int seq, EntryKind kind, const Mat& entries) final {
    Book& b = book(seq);
    check_kind("restore_entries", kind);
    if (entries.rows() > entry_capacity())
      throw std::out_of_range("KV cache restore_entries: " + std::to_string(entries.rows()) + " " + kind_name(kind) +
                              " entries, the cache holds " + std::to_string(entry_capacity()));
    if (entries.rows() > 0) check_width("restore_entries", entries.cols(), entry_width(kind));
    for (Index j = 0; j < entries.rows(); ++j) store_entry(seq, kind, j, entries.row(j));
    b.entries[static_cast<int>(kind)] = entries.rows();
  }

  CompressorState& compressor_state(int seq, EntryKind kind) final {
    book(seq);
    check_kind("compressor_state", kind);
    return state(seq, kind);
  }
  const CompressorState& compressor_state(int seq, EntryKind kind) const final {
    book(seq);
    check_kind("compressor_state", kind);
    return state(seq, kind);
  }

 protected:
  int ratio_;
  int batch_;
  int window_;
  int64_t max_seq_len_;
  int head_dim_;
  int index_head_dim_;

  int64_t entry_capacity() const { return ratio_ == 0 ? 0 : max_seq_len_ / ratio_; }
  int entry_width(EntryKind kind) const { return kind == EntryKind::main ? head_dim_ : index_head_dim_; }
  CompressorState fresh_state(EntryKind kind) const {
    return kind == EntryKind::main ? CompressorState::fresh(ratio_, head_dim_)
                                   : CompressorState::fresh(4, index_head_dim_);
  }

  // Storage hooks of a layout; arguments are already checked.
  virtual void store_window(int seq, int slot, const Eigen::RowVectorXd& kv) = 0;
  virtual Eigen::RowVectorXd load_window(int seq, int slot) const = 0;
  virtual Mat load_ring(int seq) const = 0;  // [W, d], slot order
  virtual void store_entry(int seq, EntryKind kind, int64_t j, const Eigen::RowVectorXd& entry) = 0;
  virtual Eigen::RowVectorXd load_entry(int seq, EntryKind kind, int64_t j) const = 0;
  virtual CompressorState& state(int seq, EntryKind kind) = 0;
  virtual const CompressorState& state(int seq, EntryKind kind) const = 0;
  virtual void clear_sequence(int seq) = 0;  // ring slots 0, entries dropped, fresh states

 private:
  struct Book {
    explicit Book(int window) : slot_position(window, -1) {}
    int64_t length = 0;                  // one past the last written window position
    std::vector<int64_t> slot_position;  // the position each ring slot holds, -1 = never written
    int64_t entries[2] = {0, 0};         // one past the last written entry, per EntryKind
  };
  std::vector<Book> books_;

  Book& book(int seq) { return books_[checked_seq(seq)]; }
  const Book& book(int seq) const { return books_[checked_seq(seq)]; }
  size_t checked_seq(int seq) const {
    if (seq < 0 || seq >= batch_)
      throw std::out_of_range("KV cache: sequence " + std::to_string(seq) + " is outside the batch [0, " +
                              std::to_string(batch_) + ")");
    return static_cast<size_t>(seq);
  }
  void check_kind(const char* what, EntryKind kind) const {
    if (ratio_ == 0 || (kind == EntryKind::indexer && ratio_ != 4))
      throw std::invalid_argument(std::string("KV cache ") + what + ": a ratio-" + std::to_string(ratio_) +
                                  " layer has no " + kind_name(kind) + " compressor");
  }
  static void check_width(const char* what, Index got, int expected) {
    if (got != expected)
      throw std::invalid_argument(std::string("KV cache ") + what + ": row has " + std::to_string(got) +
                                  " values, expected " + std::to_string(expected));
  }
};

// DeepSeek's layout: per sequence kv [W + max_seq_len/r, d] (ring rows first, entry j at row W + j;
// ratio 0: [W, d]), indexer kv [max_seq_len/4, ID] (ratio 4), and the compressor states.
class RingKvCache final : public CheckedCache {
 public:
  RingKvCache(const ModelConfig& cfg, int compress_ratio, int batch) : CheckedCache(cfg, compress_ratio, batch) {
    for (int seq = 0; seq < batch_; ++seq) {
      sequences_.emplace_back();
      sequences_.back().kv = Mat::Zero(window_ + entry_capacity(), head_dim_);
      if (ratio_ == 4) sequences_.back().indexer_kv = Mat::Zero(entry_capacity(), index_head_dim_);
      clear_sequence(seq);
    }
  }

 private:
  struct Sequence {
    Mat kv;          // [W + max_seq_len/r, d]
    Mat indexer_kv;  // [max_seq_len/4, ID]
    CompressorState main_state, indexer_state;
  };
  std::vector<Sequence> sequences_;

  void store_window(int seq, int slot, const Eigen::RowVectorXd& kv) override { sequences_[seq].kv.row(slot) = kv; }
  Eigen::RowVectorXd load_window(int seq, int slot) const override { return sequences_[seq].kv.row(slot); }
  Mat load_ring(int seq) const override { return sequences_[seq].kv.topRows(window_); }
  Mat& buffer(int seq, EntryKind kind) {
    return kind == EntryKind::main ? sequences_[seq].kv : sequences_[seq].indexer_kv;
  }
  Index entry_row(EntryKind kind, int64_t j) const { return kind == EntryKind::main ? window_ + j : j; }
  void store_entry(int seq, EntryKind kind, int64_t j, const Eigen::RowVectorXd& entry) override {
    buffer(seq, kind).row(entry_row(kind, j)) = entry;
  }
  Eigen::RowVectorXd load_entry(int seq, EntryKind kind, int64_t j) const override {
    const Sequence& s = sequences_[seq];
    return (kind == EntryKind::main ? s.kv : s.indexer_kv).row(entry_row(kind, j));
  }
  CompressorState& state(int seq, EntryKind kind) override {
    return kind == EntryKind::main ? sequences_[seq].main_state : sequences_[seq].indexer_state;
  }
  const CompressorState& state(int seq, EntryKind kind) const override {
    return kind == EntryKind::main ? sequences_[seq].main_state : sequences_[seq].indexer_state;
  }
  void clear_sequence(int seq) override {
    Sequence& s = sequences_[seq];
    s.kv.setZero();
    s.indexer_kv.setZero();
    if (ratio_ != 0) s.main_state = fresh_state(EntryKind::main);
    if (ratio_ == 4) s.indexer_state = fresh_state(EntryKind::indexer);
  }
};

// Production engines' layout. Entries live in a shared pool of pages of kPagePositions positions:
// entry j (completed by position (j+1)r - 1) lives on the sequence's page j / (128/r), row j mod
// (128/r). A block table per sequence maps its page i to a pool page, handed out on first write
// from a free list in scrambled order. The window ring and the compressor states live in a
// state-cache slot per sequence, slots also assigned in scrambled order.
class PagedKvCache final : public CheckedCache {
 public:
  PagedKvCache(const ModelConfig& cfg, int compress_ratio, int batch, uint64_t scramble_seed)
      : CheckedCache(cfg, compress_ratio, batch),
        entries_per_page_(compress_ratio == 0 ? 0 : kPagePositions / compress_ratio),
        pages_per_sequence_((cfg.max_seq_len + kPagePositions - 1) / kPagePositions),
        block_table_(batch, std::vector<int>(ratio_ == 0 ? 0 : pages_per_sequence_, -1)) {
    if (ratio_ != 0) {
      const int pool_pages = batch_ * pages_per_sequence_;
      main_pool_.assign(pool_pages, Mat::Zero(entries_per_page_, head_dim_));
      if (ratio_ == 4) indexer_pool_.assign(pool_pages, Mat::Zero(entries_per_page_, index_head_dim_));
      // Handed out from the back: the first allocation gets order[0].
      const std::vector<int> order = scrambled(pool_pages, scramble_seed);
      free_pages_.assign(order.rbegin(), order.rend());
    }
    // A different permutation than the pages' (seed 0 still meaning no scrambling).
    slot_of_ = scrambled(batch_, scramble_seed == 0 ? 0 : scramble_seed ^ 0x9e3779b97f4a7c15ULL);
    slots_.resize(batch_);
    for (int seq = 0; seq < batch_; ++seq) {
      slots_[slot_of_[seq]].ring = Mat::Zero(window_, head_dim_);
      clear_sequence(seq);
    }
  }

  const std::vector<int>& block_table(int seq) const { return block_table_[seq]; }
  int state_slot(int seq) const { return slot_of_[seq]; }

 private:
  struct StateSlot {
    Mat ring;  // [W, d]
    CompressorState main_state, indexer_state;
  };
  int entries_per_page_;
  int pages_per_sequence_;
  std::vector<std::vector<int>> block_table_;  // [batch][page] -> pool page
  std::vector<Mat> main_pool_;                 // pool page -> [128/r, d]
  std::vector<Mat> indexer_pool_;              // pool page -> [32, ID] (ratio 4)
  std::vector<int> free_pages_;                // next page to hand out at the back
  std::vector<int> slot_of_;                   // sequence -> state slot
  std::vector<StateSlot> slots_;

  // A permutation of 0..n-1 (identity for seed 0); Fisher-Yates over a fixed generator, so the
  // layout is the same on every platform.
  static std::vector<int> scrambled(int n, uint64_t seed) {
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    if (seed == 0) return order;
    std::mt19937_64 rng(seed);
    for (int i = n - 1; i > 0; --i) std::swap(order[i], order[rng() % static_cast<uint64_t>(i + 1)]);
    return order;
  }

  StateSlot& slot(int seq) { return slots_[slot_of_[seq]]; }
  const StateSlot& slot(int seq) const { return slots_[slot_of_[seq]]; }

  void store_window(int seq, int slot_index, const Eigen::RowVectorXd& kv) override {
    slot(seq).ring.row(slot_index) = kv;
  }
  Eigen::RowVectorXd load_window(int seq, int slot_index) const override { return slot(seq).ring.row(slot_index); }
  Mat load_ring(int seq) const override { return slot(seq).ring; }

  std::vector<Mat>& pool(EntryKind kind) { return kind == EntryKind::main ? main_pool_ : indexer_pool_; }
  void store_entry(int seq, EntryKind kind, int64_t j, const Eigen::RowVectorXd& entry) override {
    int& page = block_table_[seq][j / entries_per_page_];
    if (page < 0) {
      page = free_pages_.back();  // the pool holds pages_per_sequence_ pages for every sequence
      free_pages_.pop_back();
    }
    pool(kind)[page].row(j % entries_per_page_) = entry;
  }
  Eigen::RowVectorXd load_entry(int seq, EntryKind kind, int64_t j) const override {
    const int page = block_table_[seq][j / entries_per_page_];
    if (page < 0)
      throw std::logic_error("paged KV cache: entry " + std::to_string(j) + " of sequence " + std::to_string(seq) +
                             " is on a page that was never allocated");
    const std::vector<Mat>& p = kind == EntryKind::main ? main_pool_ : indexer_pool_;
    return p[page].row(j % entries_per_page_);
  }
  CompressorState& state(int seq, EntryKind kind) override {
    return kind == EntryKind::main ? slot(seq).main_state : slot(seq).indexer_state;
  }
  const CompressorState& state(int seq, EntryKind kind) const override {
    return kind == EntryKind::main ? slot(seq).main_state : slot(seq).indexer_state;
  }
  void clear_sequence(int seq) override {
    StateSlot& s = slot(seq);
    s.ring.setZero();
    if (ratio_ != 0) s.main_state = fresh_state(EntryKind::main);
    if (ratio_ == 4) s.indexer_state = fresh_state(EntryKind::indexer);
    for (int& page : block_table_[seq]) {
      if (page < 0) continue;
      main_pool_[page].setZero();
      if (ratio_ == 4) indexer_pool_[page].setZero();
      free_pages_.push_back(page);
      page = -1;
    }
  }
};

}  // namespace

std::unique_ptr<KvCache> make_ring_cache(const ModelConfig& cfg, int compress_ratio, int batch) {
  return std::make_unique<RingKvCache>(cfg, compress_ratio, batch);
}

std::unique_ptr<KvCache> make_paged_cache(const ModelConfig& cfg, int compress_ratio, int batch,
                                          uint64_t scramble_seed) {
  return std::make_unique<PagedKvCache>(cfg, compress_ratio, batch, scramble_seed);
}

namespace {
const PagedKvCache& as_paged(const KvCache& cache) {
  const auto* paged = dynamic_cast<const PagedKvCache*>(&cache);
  if (paged == nullptr) throw std::invalid_argument("paged layout query on a cache that is not a paged cache");
  return *paged;
}
void check_paged_seq(const KvCache& cache, int seq) {
  if (seq < 0 || seq >= cache.batch())
    throw std::out_of_range("paged layout query: sequence " + std::to_string(seq) + " is outside the batch [0, " +
                            std::to_string(cache.batch()) + ")");
}
}  // namespace

std::vector<int> paged_block_table(const KvCache& paged_cache, int seq) {
  check_paged_seq(paged_cache, seq);
  return as_paged(paged_cache).block_table(seq);
}

int paged_state_slot(const KvCache& paged_cache, int seq) {
  check_paged_seq(paged_cache, seq);
  return as_paged(paged_cache).state_slot(seq);
}

}  // namespace dsv4::ref
