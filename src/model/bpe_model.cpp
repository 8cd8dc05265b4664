#include "bpe_model.h"

#include <mutex>
#include <queue>

#include "../core/utf8.h"

namespace turnrl::detail {

std::pair<std::string, std::string> bpe_merge_parts(const JsonAt& entry) {
  if (entry.node.is_string()) {
    // "a b": the separator is the first space (neither side of a byte-level merge contains one).
    const std::string text = entry.string();
    const size_t space = text.find(' ');
    if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
      fail("{}: merge '{}' is not two tokens separated by one space", entry.where(), text);
    return {text.substr(0, space), text.substr(space + 1)};
  }
  if (entry.node.is_array() && entry.node.size() == 2) return {entry[size_t{0}].string(), entry[size_t{1}].string()};
  fail("{}: a merge is \"a b\" or [\"a\", \"b\"], found {}", entry.where(), entry.node.dump().substr(0, 80));
}

BpeModel BpeModel::from_json(const JsonAt& node) {
  // HF's model deserializer is untagged: a file without "type" is read as BPE when it has merges.
  const std::string type = node.has("type") ? node["type"].string() : "BPE";
  if (type != "BPE")
    fail("{}: model type '{}' is not supported; supported: BPE (byte-level)", node["type"].where(), type);
  if (node.flag("byte_fallback", false))
    fail("{}: true is not supported (byte-level BPE needs no byte fallback; SentencePiece-style BPE is not implemented)",
         node["byte_fallback"].where());
  if (node.has("dropout") && node["dropout"].node.get<double>() != 0.0)
    fail("{}: BPE dropout {} is not supported (training-time regularisation; use null)", node["dropout"].where(),
         node["dropout"].node.dump());
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (node.has(key) && !node[key].string().empty())
      fail("{}: '{}' is not supported (byte-level BPE uses none)", node[key].where(), node[key].string());

  BpeModel m;
  m.ignore_merges_ = node.flag("ignore_merges", false);
  const JsonAt vocab = node.required("vocab");
  if (!vocab.node.is_object()) fail("{}: expected an object of token -> id", vocab.where());
  int64_t max_id = -1;
  for (const auto& [token, id_node] : vocab.node.items()) {
    if (!id_node.is_number_integer() || id_node.get<int64_t>() < 0 || id_node.get<int64_t>() > int64_t(UINT32_MAX) - 1)
      fail("{}.{}: expected a non-negative integer id, found {}", vocab.where(), token, id_node.dump());
    max_id = std::max(max_id, id_node.get<int64_t>());
  }
  m.id_to_token_.resize(size_t(max_id + 1));
  m.has_id_.assign(size_t(max_id + 1), false);
  m.token_to_id_.reserve(vocab.node.size());
  for (const auto& [token, id_node] : vocab.node.items()) {
    const auto id = id_node.get<uint32_t>();
    if (m.has_id_[id]) fail("{}: id {} is given to both '{}' and '{}'", vocab.where(), id, m.id_to_token_[id], token);
    m.has_id_[id] = true;
    m.id_to_token_[id] = token;
    m.token_to_id_.emplace(token, id);
  }

  const JsonAt merges = node.required("merges");
  merges.expect_array();
  m.merges_.reserve(merges.node.size());
  for (size_t rank = 0; rank < merges.node.size(); ++rank) {
    const JsonAt entry = merges[rank];
    const auto [left, right] = bpe_merge_parts(entry);
    const auto find = [&](const std::string& token) {
      const auto it = m.token_to_id_.find(token);
      if (it == m.token_to_id_.end()) fail("{}: token '{}' of the merge is not in the vocabulary", entry.where(), token);
      return it->second;
    };
    const uint32_t left_id = find(left), right_id = find(right), merged_id = find(left + right);
    // HF collects the merges into a map, so a repeated pair takes its last rank.
    m.merges_[pair_key(left_id, right_id)] = Merge{uint32_t(rank), merged_id};
  }

  // The one-character tokens of the byte-level alphabet (code points below U+0144), for a lookup
  // without hashing in the merge loop.
  m.symbol_ids_.assign(0x144, -1);
  for (char32_t c = 0; c < 0x144; ++c) {
    std::string symbol;
    utf8_append(symbol, c);
    const auto it = m.token_to_id_.find(symbol);
    if (it != m.token_to_id_.end()) m.symbol_ids_[c] = it->second;
  }
  if (node.has("unk_token")) {
    const std::string unk = node["unk_token"].string();
    const auto it = m.token_to_id_.find(unk);
    if (it == m.token_to_id_.end()) fail("{}: '{}' is not in the vocabulary", node["unk_token"].where(), unk);
    m.unk_id_ = it->second;
  }
  return m;
}

std::optional<int64_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = token_to_id_.find(std::string(token));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::token_of(int64_t id) const {
  if (id < 0 || id >= size() || !has_id_[size_t(id)]) return nullptr;
  return &id_to_token_[size_t(id)];
}

const BpeModel::Merge* BpeModel::find_merge(uint32_t left, uint32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

uint32_t BpeModel::symbol_id(std::string_view piece, size_t pos, size_t length) const {
  const char32_t c = utf8_decode_at(piece, pos, length);
  if (c < symbol_ids_.size() && symbol_ids_[c] >= 0) return uint32_t(symbol_ids_[c]);
  const auto it = token_to_id_.find(std::string(piece.substr(pos, length)));
  if (it != token_to_id_.end()) return it->second;
  if (unk_id_) return *unk_id_;
  fail("BPE: the character '{}' is not in the vocabulary and the model has no unk_token", piece.substr(pos, length));
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int64_t>& out) const {
  const bool cacheable = piece.size() <= kCachedPieceBytes;
  if (cacheable) {
    std::shared_lock lock(cache_->mutex);
    const auto it = cache_->ids.find(std::string(piece));
    if (it != cache_->ids.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<uint32_t> ids;
  merge_piece(piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock lock(cache_->mutex);
    if (cache_->ids.size() < kCacheCapacity) cache_->ids.emplace(piece, std::move(ids));
  }
}

void BpeModel::merge_piece(std::string_view piece, std::vector<uint32_t>& ids) const {
  if (ignore_merges_) {
    // Llama-3: a piece that is itself a vocabulary entry is taken whole, merges or not.
    const auto whole = token_to_id_.find(std::string(piece));
    if (whole != token_to_id_.end()) {
      ids.push_back(whole->second);
      return;
    }
  }
  // One symbol per character, linked so that merges are O(1) splices.
  struct Symbol {
    uint32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (size_t pos = 0; pos < piece.size();) {
    const size_t length = std::max<size_t>(1, utf8_sequence_length(piece, pos));
    const int index = int(symbols.size());
    symbols.push_back({symbol_id(piece, pos, length), index - 1, -1, true});
    if (index > 0) symbols[size_t(index) - 1].next = index;
    pos += length;
  }
  if (symbols.size() > 1) {
    struct Candidate {
      uint32_t rank;
      int pos;  // left symbol
      uint32_t merged_id;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    const auto push = [&](int left) {
      if (left < 0 || symbols[size_t(left)].next < 0) return;
      if (const Merge* m = find_merge(symbols[size_t(left)].id, symbols[size_t(symbols[size_t(left)].next)].id))
        queue.push({m->rank, left, m->merged_id});
    };
    for (int i = 0; i + 1 < int(symbols.size()); ++i) push(i);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& left = symbols[size_t(c.pos)];
      if (!left.alive || left.next < 0) continue;
      Symbol& right = symbols[size_t(left.next)];
      // Stale entry: one side was merged into something else since it was queued.
      const Merge* m = find_merge(left.id, right.id);
      if (!m || m->merged_id != c.merged_id || m->rank != c.rank) continue;
      left.id = c.merged_id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[size_t(right.next)].prev = c.pos;
      push(left.prev);
      push(c.pos);
    }
  }
  for (const Symbol& s : symbols)
    if (s.alive) ids.push_back(s.id);
}

}  // namespace turnrl::detail
