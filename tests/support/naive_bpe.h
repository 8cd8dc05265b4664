#pragma once
// Naive byte-level BPE, written from the algorithm's definition rather than from the library's
// priority-queue merge loop: scan the whole word for the adjacent pair with the lowest merge rank
// (leftmost on ties), merge it, rescan; O(n^2) per word. Tests compare the library against it and
// tokenizer_bench times it as the baseline.
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace turnrl::reference {

class NaiveBpe {
 public:
  // Reads model.vocab, model.merges ("a b" or ["a", "b"]) and model.ignore_merges of a tokenizer.json.
  explicit NaiveBpe(const std::string& tokenizer_json_path);
  // Ids of one pre-tokenized piece (already in the byte-level alphabet).
  std::vector<int64_t> encode_piece(const std::string& piece) const;

 private:
  std::map<std::pair<std::string, std::string>, size_t> ranks_;
  std::unordered_map<std::string, int64_t> vocab_;
  bool ignore_merges_ = false;
};

}  // namespace turnrl::reference
