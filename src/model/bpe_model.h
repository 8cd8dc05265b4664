#pragma once
// tokenizer.json's "model" of type BPE: the vocabulary, the merge ranks and the merge loop that
// turns one pre-tokenized piece into ids (internal).
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bpe_json.h"

namespace turnrl::detail {

// The two tokens of one entry of model.merges: "a b" (split at its one space) or ["a", "b"].
std::pair<std::string, std::string> bpe_merge_parts(const JsonAt& entry);

class BpeModel {
 public:
  // Reads the "model" node: type BPE, merges as "a b" strings or ["a", "b"] pairs; refuses
  // byte_fallback, dropout, continuing_subword_prefix / end_of_word_suffix with a clear error.
  static BpeModel from_json(const JsonAt& node);

  // Appends the ids of one piece (in the vocabulary's alphabet) to `out`. The lowest-ranked
  // adjacent pair is merged first (leftmost on ties), as HF does, with a priority queue: each
  // merge costs O(log n) instead of a rescan of the word. Results of short pieces are cached, as
  // HF caches words: text repeats its words. Thread-safe.
  void encode_piece(std::string_view piece, std::vector<int64_t>& out) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  // Largest id + 1 over the vocabulary.
  int64_t size() const { return int64_t(id_to_token_.size()); }
  // The token of `id`, or nullptr when no vocabulary entry has it.
  const std::string* token_of(int64_t id) const;

 private:
  struct Merge {
    uint32_t rank;
    uint32_t merged_id;
  };
  static uint64_t pair_key(uint32_t left, uint32_t right) { return (uint64_t(left) << 32) | right; }
  const Merge* find_merge(uint32_t left, uint32_t right) const;
  uint32_t symbol_id(std::string_view piece, size_t pos, size_t length) const;
  void merge_piece(std::string_view piece, std::vector<uint32_t>& ids) const;

  // Pieces up to kCachedPieceBytes long, until kCacheCapacity entries (then no more are added).
  static constexpr size_t kCachedPieceBytes = 64, kCacheCapacity = 50000;
  struct Cache {
    std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<uint32_t>> ids;
  };

  std::unordered_map<std::string, uint32_t> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<uint32_t> unk_id_;
  std::vector<int64_t> symbol_ids_;  // code point -> id of that one-character token, -1 if none
  std::unique_ptr<Cache> cache_ = std::make_unique<Cache>();
  bool ignore_merges_ = false;
};

}  // namespace turnrl::detail
