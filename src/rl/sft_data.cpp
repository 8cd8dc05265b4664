#include "turnrl/rl/sft_data.h"

#include <algorithm>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "turnrl/core/error.h"
#include "turnrl/core/random.h"

namespace turnrl {
namespace {

using json = nlohmann::json;

ChatExample parse_chat_line(const std::string& line, const std::string& where) {
  json doc;
  try {
    doc = json::parse(line);
  } catch (const json::parse_error& e) {
    fail("{}: not a JSON object: {}", where, e.what());
  }
  if (!doc.is_object()) fail("{}: expected a JSON object with \"messages\", got a {}", where, doc.type_name());
  const auto messages = doc.find("messages");
  if (messages == doc.end()) fail("{}: missing \"messages\" (a list of {{\"role\", \"content\"}} objects)", where);
  if (!messages->is_array()) fail("{}: \"messages\" must be a list, got a {}", where, messages->type_name());
  ChatExample out;
  out.source = where;
  bool any_assistant = false;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    if (!m.is_object()) fail("{}: messages[{}] must be an object with \"role\" and \"content\"", where, i);
    const auto role = m.find("role"), content = m.find("content");
    if (role == m.end() || !role->is_string()) fail("{}: messages[{}].role is missing or not a string", where, i);
    if (content == m.end() || !content->is_string())
      fail("{}: messages[{}].content is missing or not a string", where, i);
    const std::string name = role->get<std::string>();
    if (name != "system" && name != "user" && name != "assistant")
      fail("{}: messages[{}].role '{}' is not allowed; allowed: system, user, assistant", where, i, name);
    any_assistant = any_assistant || name == "assistant";
    out.messages.push_back({name, content->get<std::string>()});
  }
  if (!any_assistant) fail("{}: \"messages\" has no assistant message to learn from", where);
  return out;
}

}  // namespace

std::vector<ChatExample> read_chat_jsonl(const std::string& file) {
  std::ifstream in(file);
  if (!in) fail("sft data: cannot open '{}'", file);
  std::vector<ChatExample> out;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_chat_line(line, fmt::format("{}:{}", file, number)));
  }
  if (in.bad()) fail("sft data: reading '{}' failed", file);
  return out;
}

std::vector<int64_t> SFTRows::lengths() const {
  std::vector<int64_t> out;
  for (const TokenIds& t : tokens) out.push_back(int64_t(t.size()));
  return out;
}

int64_t SFTRows::loss_tokens(size_t i) const {
  return std::count(loss_mask[i].begin(), loss_mask[i].end(), uint8_t(1));
}

SFTRows tokenize_conversations(const std::vector<ChatExample>& examples, const ChatCodec& codec,
                               const SFTDataConfig& data) {
  if (data.max_length < 2) fail("data.max_length: {} is out of range; allowed: >= 2", data.max_length);
  if (data.truncation != "truncate" && data.truncation != "drop")
    fail("data.truncation: '{}' is not allowed; allowed: truncate, drop", data.truncation);
  SFTRows out;
  const size_t max_length = size_t(data.max_length);
  for (const ChatExample& example : examples) {
    ++out.conversations;
    ConversationTokens c;
    try {
      c = conversation_tokens(codec, example.messages);
    } catch (const Error& e) {
      fail("{}: {}", example.source, e.what());
    }
    if (c.tokens.size() > max_length) {
      if (data.truncation == "drop") {
        ++out.dropped;
        continue;
      }
      c.tokens.resize(max_length);
      c.assistant.resize(max_length);
      ++out.truncated;
    }
    c.assistant[0] = 0;  // column 0 has no context to be predicted from
    if (std::find(c.assistant.begin(), c.assistant.end(), uint8_t(1)) == c.assistant.end()) {
      ++out.dropped;
      continue;
    }
    if (data.packing && !out.tokens.empty() && out.tokens.back().size() + c.tokens.size() <= max_length) {
      out.tokens.back().insert(out.tokens.back().end(), c.tokens.begin(), c.tokens.end());
      out.loss_mask.back().insert(out.loss_mask.back().end(), c.assistant.begin(), c.assistant.end());
      continue;
    }
    out.tokens.push_back(std::move(c.tokens));
    out.loss_mask.push_back(std::move(c.assistant));
  }
  if (data.packing) out.packed_rows = int64_t(out.tokens.size());
  return out;
}

std::vector<std::vector<int64_t>> epoch_micro_batches(const std::vector<int64_t>& lengths, int64_t micro_batch_size,
                                                      int64_t bucket_window, uint64_t seed, int64_t epoch) {
  if (micro_batch_size < 1) fail("sft.micro_batch_size: {} is out of range; allowed: >= 1", micro_batch_size);
  if (bucket_window < 1) fail("data.bucket_window: {} is out of range; allowed: >= 1", bucket_window);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + uint64_t(epoch) + 1;
  // Fisher-Yates with splitmix64: the same order on every platform and LibTorch version.
  auto shuffle = [&](auto& items) {
    for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[splitmix64(state) % i]);
  };
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  shuffle(order);
  for (size_t start = 0; start < order.size(); start += size_t(bucket_window)) {
    const auto end = order.begin() + std::ptrdiff_t(std::min(order.size(), start + size_t(bucket_window)));
    std::stable_sort(order.begin() + std::ptrdiff_t(start), end,
                     [&](int64_t a, int64_t b) { return lengths[size_t(a)] < lengths[size_t(b)]; });
  }
  std::vector<std::vector<int64_t>> out;
  for (size_t start = 0; start < order.size(); start += size_t(micro_batch_size))
    out.emplace_back(order.begin() + std::ptrdiff_t(start),
                     order.begin() + std::ptrdiff_t(std::min(order.size(), start + size_t(micro_batch_size))));
  shuffle(out);
  return out;
}

SFTBatch collate(const SFTRows& rows, const std::vector<int64_t>& indices, int64_t pad_id, torch::Device device) {
  if (indices.empty()) fail("collate: no rows");
  size_t width = 0;
  for (int64_t i : indices) {
    if (i < 0 || size_t(i) >= rows.size()) fail("collate: row {} is out of range; the data has {} rows", i, rows.size());
    width = std::max(width, rows.tokens[size_t(i)].size());
  }
  const int64_t batch = int64_t(indices.size());
  torch::Tensor tokens = torch::full({batch, int64_t(width)}, pad_id, torch::kLong);
  torch::Tensor attention = torch::zeros({batch, int64_t(width)}, torch::kBool);
  torch::Tensor loss = torch::zeros({batch, int64_t(width)}, torch::kBool);
  auto t = tokens.accessor<int64_t, 2>();
  auto a = attention.accessor<bool, 2>();
  auto l = loss.accessor<bool, 2>();
  for (int64_t b = 0; b < batch; ++b) {
    const TokenIds& row = rows.tokens[size_t(indices[size_t(b)])];
    const std::vector<uint8_t>& mask = rows.loss_mask[size_t(indices[size_t(b)])];
    for (size_t j = 0; j < row.size(); ++j) {
      t[b][int64_t(j)] = row[j];
      a[b][int64_t(j)] = true;
      l[b][int64_t(j)] = mask[j] != 0;
    }
  }
  return {tokens.to(device), attention.to(device), loss.to(device)};
}

}  // namespace turnrl
