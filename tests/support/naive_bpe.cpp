#include "naive_bpe.h"

#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace turnrl::reference {

NaiveBpe::NaiveBpe(const std::string& tokenizer_json_path) {
  std::ifstream in(tokenizer_json_path);
  if (!in) throw std::runtime_error("cannot open " + tokenizer_json_path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  const nlohmann::json& model = doc.at("model");
  for (const auto& [token, id] : model.at("vocab").items()) vocab_[token] = id.get<int64_t>();
  ignore_merges_ = model.value("ignore_merges", false);
  const nlohmann::json& merges = model.at("merges");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    std::pair<std::string, std::string> pair;
    if (merges[rank].is_string()) {
      const std::string m = merges[rank].get<std::string>();
      pair = {m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1)};
    } else {
      pair = {merges[rank][0].get<std::string>(), merges[rank][1].get<std::string>()};
    }
    ranks_[pair] = rank;
  }
}

std::vector<int64_t> NaiveBpe::encode_piece(const std::string& piece) const {
  if (ignore_merges_ && vocab_.count(piece)) return {vocab_.at(piece)};
  std::vector<std::string> symbols;
  for (size_t i = 0; i < piece.size();) {
    size_t n = 1;
    while (i + n < piece.size() && (static_cast<unsigned char>(piece[i + n]) & 0xC0) == 0x80) ++n;
    symbols.push_back(piece.substr(i, n));
    i += n;
  }
  while (symbols.size() > 1) {
    size_t best = symbols.size(), best_rank = SIZE_MAX;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = ranks_.find({symbols[i], symbols[i + 1]});
      if (it != ranks_.end() && it->second < best_rank) best = i, best_rank = it->second;
    }
    if (best == symbols.size()) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + long(best) + 1);
  }
  std::vector<int64_t> ids;
  for (const std::string& s : symbols) ids.push_back(vocab_.at(s));
  return ids;
}

}  // namespace turnrl::reference
