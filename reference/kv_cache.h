#pragma once
// The KV cache model (docs/math.md "KV cache"). What a sequence keeps between calls:
//   - the window ring: the window kv of its last W positions,
//   - the compressed entries of the main compressor (and of the indexer's, ratio 4),
//   - the compressor states (the uncompressed tail).
// Two layouts hold the same values:
//   RingKvCache   DeepSeek's: per sequence kv_cache [W + max_seq_len/r, d] (ring rows first, entry j
//                 at row W + j), indexer kv_cache [max_seq_len/4, ID], state buffers per sequence.
//   PagedKvCache  production engines': a shared pool of pages of 128 = lcm(4, 128) token positions;
//                 a page holds the entries those positions complete (32 C4 entries with their 32
//                 indexer entries, or 1 C128 entry); a block table per sequence maps its i-th page
//                 to a pool page (handed out in a scrambled order, so addressing bugs show); a
//                 state-cache slot per sequence holds the window ring and the compressor states.
// A layer computes bitwise the same results over either.
#include <cstdint>
#include <memory>
#include <vector>

#include "reference/config.h"
#include "reference/stages/compressor.h"
#include "reference/tensor.h"

namespace dsv4::ref {

enum class EntryKind { main, indexer };

class KvCache {
 public:
  virtual ~KvCache() = default;
  virtual int batch() const = 0;
  virtual int compress_ratio() const = 0;

  // Positions of the sequence written so far (one past the last written window position).
  virtual int64_t length(int seq) const = 0;
  // Starts the sequence anew: no positions, no entries, fresh compressor states, ring slots 0.
  virtual void reset(int seq) = 0;

  // Window kv of position pos (row [d]); a read must be within the last W written positions
  // (std::out_of_range otherwise). Positions and entries past max_seq_len throw std::out_of_range.
  virtual void write_window(int seq, int64_t pos, const Eigen::RowVectorXd& kv) = 0;
  virtual Eigen::RowVectorXd window_row(int seq, int64_t pos) const = 0;
  // The W ring slots in slot order (slot = pos mod W) after positions [0, end) were written;
  // slots no position reached are 0, as DeepSeek's zero-initialised buffer; end must be
  // length(seq) (std::out_of_range otherwise: the ring of an earlier end is gone). -> [W, d]
  virtual Mat ring(int seq, int64_t end) const = 0;

  // Compressed entry j of a sequence (row [d] main, [ID] indexer).
  virtual void write_entry(int seq, EntryKind kind, int64_t j, const Eigen::RowVectorXd& entry) = 0;
  virtual Mat entries(int seq, EntryKind kind, int64_t count) const = 0;  // rows 0..count-1

  // Puts a sequence where another run left it (stage-local replay of a captured cache): the ring
  // [W, d] in slot order after positions [0, end) were written (length(seq) becomes end; slots no
  // position reached should hold 0), and exactly the compressed entries given (rows 0..n-1).
  // The compressor states are restored through compressor_state(seq, kind).
  virtual void restore_window(int seq, int64_t end, const Mat& ring) = 0;
  virtual void restore_entries(int seq, EntryKind kind, const Mat& entries) = 0;

  virtual CompressorState& compressor_state(int seq, EntryKind kind) = 0;
  virtual const CompressorState& compressor_state(int seq, EntryKind kind) const = 0;
};

// cfg and compress_ratio size the buffers; positions must stay below cfg.max_seq_len.
std::unique_ptr<KvCache> make_ring_cache(const ModelConfig& cfg, int compress_ratio, int batch);
// scramble_seed permutes the pool's page order (0 = pages in allocation order).
std::unique_ptr<KvCache> make_paged_cache(const ModelConfig& cfg, int compress_ratio, int batch,
                                          uint64_t scramble_seed);

// The layout of a paged cache, for tests that check addressing (std::invalid_argument for another
// cache): the pool page of each of the sequence's pages (-1 = not yet allocated), and its state slot.
std::vector<int> paged_block_table(const KvCache& paged_cache, int seq);
int paged_state_slot(const KvCache& paged_cache, int seq);

}  // namespace dsv4::ref
