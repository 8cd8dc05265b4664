#pragma once
// tokenizer.json's "model" of type BPE: the vocabulary, the merge ranks and the merge loop that
// turns one pre-tokenized piece into ids (internal).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bpe_json.h"

namespace turnrl::detail {

class BpeModel {
 public:
  // Reads the "model" node: type BPE, merges as "a b" strings or ["a", "b"] pairs; refuses
  // byte_fallback, dropout, continuing_subword_prefix / end_of_word_suffix with a clear error.
  static BpeModel from_json(const JsonAt& node);

  // Appends the ids of one piece (in the vocabulary's alphabet) to `out`. The lowest-ranked
  // adjacent pair is merged first (leftmost on ties), as HF does, with a priority queue: each
  // merge costs O(log n) instead of a rescan of the word.
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

  std::unordered_map<std::string, uint32_t> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<uint32_t> unk_id_;
  bool ignore_merges_ = false;
};

}  // namespace turnrl::detail
