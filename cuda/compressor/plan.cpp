// Host-side batch plans: validation, the entry list of a ragged batch, and their upload.
#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>

#include "cuda/compressor/compressor_api.h"

namespace dsv4::cuda {
namespace {

void require_ratio(int ratio, const char* who) {
  if (ratio != 4 && ratio != 128)
    throw std::invalid_argument(std::string(who) + ": ratio must be 4 or 128, got " + std::to_string(ratio));
}

ChunkDesc to_desc(const SequenceChunk& c) { return {c.start_pos, c.first_row, c.length, c.state_index}; }

std::vector<ChunkDesc> to_desc(const std::vector<SequenceChunk>& chunks) {
  std::vector<ChunkDesc> out;
  out.reserve(chunks.size());
  for (const SequenceChunk& c : chunks) out.push_back(to_desc(c));
  return out;
}

}  // namespace

BatchPlan::BatchPlan(const std::vector<SequenceChunk>& chunks, int ratio) : ratio_(ratio), host_chunks_(chunks) {
  require_ratio(ratio, "BatchPlan");
  std::set<int32_t> states;
  offsets_.push_back(0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SequenceChunk& c = chunks[i];
    const std::string who = "BatchPlan chunk " + std::to_string(i);
    if (c.start_pos < 0 || c.length < 0 || c.first_row < 0 || c.state_index < 0)
      throw std::invalid_argument(who + ": start_pos, length, first_row and state_index must be >= 0, got " +
                                  std::to_string(c.start_pos) + ", " + std::to_string(c.length) + ", " +
                                  std::to_string(c.first_row) + ", " + std::to_string(c.state_index));
    if (!states.insert(c.state_index).second)
      throw std::invalid_argument(who + ": state " + std::to_string(c.state_index) +
                                  " is used by two chunks of one batch (their writes would race)");
    n_rows_ = std::max(n_rows_, c.first_row + c.length);
    n_states_ = std::max(n_states_, c.state_index + 1);
    for (int64_t j = c.start_pos / ratio; j < (c.start_pos + c.length) / ratio; ++j) {
      host_items_.push_back({to_desc(c), j});
      max_entry_ = std::max(max_entry_, j);
    }
    offsets_.push_back(static_cast<int64_t>(host_items_.size()));
  }
  chunks_ = DeviceBuffer<ChunkDesc>(to_desc(chunks));
  items_ = DeviceBuffer<EntryDesc>(host_items_);
}

DecodePlan::DecodePlan(const std::vector<int64_t>& positions, const std::vector<int32_t>& state_index, int ratio)
    : ratio_(ratio), positions_(positions) {
  require_ratio(ratio, "DecodePlan");
  if (positions.size() != state_index.size())
    throw std::invalid_argument("DecodePlan: " + std::to_string(positions.size()) + " positions but " +
                                std::to_string(state_index.size()) + " state indices, expected as many");
  std::set<int32_t> states;
  for (size_t b = 0; b < positions.size(); ++b) {
    if (positions[b] < 0 || state_index[b] < 0)
      throw std::invalid_argument("DecodePlan row " + std::to_string(b) +
                                  ": position and state index must be >= 0, got " + std::to_string(positions[b]) +
                                  ", " + std::to_string(state_index[b]));
    if (!states.insert(state_index[b]).second)
      throw std::invalid_argument("DecodePlan row " + std::to_string(b) + ": state " + std::to_string(state_index[b]) +
                                  " is used twice in one step");
    n_states_ = std::max(n_states_, state_index[b] + 1);
    if ((positions[b] + 1) % ratio == 0) max_entry_ = std::max(max_entry_, positions[b] / ratio);
  }
  dev_positions_ = DeviceBuffer<int64_t>(positions);
  dev_state_index_ = DeviceBuffer<int32_t>(state_index);
}

}  // namespace dsv4::cuda
