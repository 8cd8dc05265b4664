#include "turnrl/model/vocab_trim.h"

#include <filesystem>
#include <unordered_map>

#include "bpe_byte_level.h"
#include "bpe_json.h"
#include "bpe_model.h"
#include "turnrl/core/checked_write.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/model/bpe_tokenizer.h"

namespace turnrl {

namespace fs = std::filesystem;
using detail::JsonAt;
using nlohmann::json;

namespace {

json read_json(const std::string& path) { return detail::parse_json(read_file(path, "the tokenizer file"), path); }

void write_json(const std::string& path, const json& doc) { write_file(path, doc.dump(2) + "\n"); }

// The input's ids mapped to the written ones; an id that was dropped or never existed is an error
// naming where the file holds it.
class IdMap {
 public:
  explicit IdMap(const std::vector<int64_t>& new_id_of_old) : new_id_of_old_(new_id_of_old) {}

  int64_t operator()(const JsonAt& id) const {
    const int64_t old_id = id.integer();
    if (old_id < 0 || old_id >= int64_t(new_id_of_old_.size()) || new_id_of_old_[size_t(old_id)] < 0)
      fail("{}: id {} names no token the trimmed tokenizer keeps (ids 0..{} of the input; only added tokens and the "
           "corpus's tokens are kept)",
           id.where(), old_id, new_id_of_old_.size() - 1);
    return new_id_of_old_[size_t(old_id)];
  }
  // An id, a list of ids or null (generation_config.json's eos_token_id is either).
  json ids(const JsonAt& node) const {
    if (node.node.is_null()) return node.node;
    if (!node.node.is_array()) return (*this)(node);
    json out = json::array();
    for (size_t i = 0; i < node.node.size(); ++i) out.push_back((*this)(node[i]));
    return out;
  }

 private:
  const std::vector<int64_t>& new_id_of_old_;
};

// The special-token ids a post-processor adds (TemplateProcessing as Llama-3 writes it; BERT and
// RoBERTa's [token, id] pairs), through Sequences.
void remap_post_processor(const JsonAt& node, json& out, const IdMap& map) {
  if (!node.node.is_object()) return;
  const std::string type = node.has("type") ? node["type"].string() : "";
  if (type == "Sequence") {
    const JsonAt processors = node.required("processors");
    processors.expect_array();
    for (size_t i = 0; i < processors.node.size(); ++i) remap_post_processor(processors[i], out["processors"][i], map);
  } else if (type == "TemplateProcessing" && node.has("special_tokens")) {
    for (const auto& [name, entry] : node["special_tokens"].node.items())
      out["special_tokens"][name]["ids"] = map.ids(node["special_tokens"][name.c_str()].required("ids"));
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    for (const char* key : {"sep", "cls"})
      if (node.has(key)) out[key][1] = map(node[key][size_t{1}]);
  }
}

// model.vocab's token -> id (BpeTokenizer::token_to_id looks at the added tokens first).
using VocabIds = std::unordered_map<std::string, int64_t>;

// The ids of everything `texts` and `keep_ids` need, before the closure under merges.
std::vector<bool> seed_tokens(const BpeTokenizer& full, const VocabIds& vocab_ids, const std::vector<std::string>& texts,
                              const std::vector<int64_t>& keep_ids, const std::string& source) {
  std::vector<bool> kept(size_t(full.vocab_size()), false);
  for (const std::string& symbol : detail::byte_level_symbols()) {
    const auto id = vocab_ids.find(symbol);
    if (id == vocab_ids.end())
      fail("{}: the byte-level symbol '{}' is not in model.vocab; only a byte-level BPE vocabulary with all 256 byte "
           "symbols can be trimmed (other text must stay encodable)",
           source, symbol);
    kept[size_t(id->second)] = true;
  }
  for (const AddedToken& added : full.added_tokens()) kept[size_t(added.id)] = true;
  for (const int64_t id : keep_ids) {
    if (id < 0 || id >= full.vocab_size() || full.token_to_id(full.id_to_token(id)) != id)
      fail("trim_vocabulary: keep_ids holds {}, which is no id of {} (0..{})", id, source, full.vocab_size() - 1);
    kept[size_t(id)] = true;
  }
  for (const std::string& text : texts)
    for (const bool parse_special : {false, true})
      for (const int64_t id : full.encode(text, parse_special)) kept[size_t(id)] = true;
  return kept;
}

}  // namespace

TrimmedVocabulary trim_vocabulary(const std::string& tokenizer_dir, const std::vector<std::string>& texts,
                                  const std::string& out_dir, const std::vector<int64_t>& keep_ids) {
  if (!fs::is_directory(tokenizer_dir))
    fail("trim_vocabulary: the tokenizer folder '{}' does not exist (expected tokenizer.json and tokenizer_config.json "
         "in it)",
         tokenizer_dir);
  if (fs::exists(out_dir) && fs::equivalent(tokenizer_dir, out_dir))
    fail("trim_vocabulary: the output folder '{}' is the input folder; write the trimmed tokenizer elsewhere", out_dir);
  const std::string tokenizer_path = tokenizer_dir + "/tokenizer.json";
  const std::string config_path = tokenizer_dir + "/tokenizer_config.json";
  const BpeTokenizer full = BpeTokenizer::from_file(tokenizer_path);  // refuses what is not byte-level BPE
  json tokenizer_doc = read_json(tokenizer_path);
  json config_doc = read_json(config_path);
  const JsonAt root{tokenizer_doc, tokenizer_path, ""};
  const JsonAt model = root["model"];

  VocabIds vocab_ids;
  vocab_ids.reserve(model["vocab"].node.size());
  for (const auto& [token, id] : model["vocab"].node.items()) vocab_ids.emplace(token, id.get<int64_t>());

  TrimmedVocabulary result;
  result.full_vocab_size = full.vocab_size();
  std::vector<bool> kept = seed_tokens(full, vocab_ids, texts, keep_ids, tokenizer_path);
  if (model.has("unk_token")) kept[size_t(vocab_ids.at(model["unk_token"].string()))] = true;

  // The closure: every merge that forms a kept token keeps its two parts.
  const JsonAt merges = model["merges"];
  std::vector<std::pair<std::string, std::string>> merge_parts;
  merge_parts.reserve(merges.node.size());
  std::unordered_map<int64_t, std::vector<size_t>> merges_forming;  // merged token id -> merge indices
  for (size_t i = 0; i < merges.node.size(); ++i) {
    merge_parts.push_back(detail::bpe_merge_parts(merges[i]));
    merges_forming[vocab_ids.at(merge_parts[i].first + merge_parts[i].second)].push_back(i);
  }
  std::vector<int64_t> pending;
  for (size_t id = 0; id < kept.size(); ++id)
    if (kept[id]) pending.push_back(int64_t(id));
  while (!pending.empty()) {
    const int64_t id = pending.back();
    pending.pop_back();
    const auto forming = merges_forming.find(id);
    if (forming == merges_forming.end()) continue;
    for (const size_t m : forming->second)
      for (const std::string* part : {&merge_parts[m].first, &merge_parts[m].second}) {
        const int64_t part_id = vocab_ids.at(*part);
        if (!kept[size_t(part_id)]) {
          kept[size_t(part_id)] = true;
          pending.push_back(part_id);
        }
      }
  }

  result.new_id_of_old.assign(kept.size(), -1);
  for (size_t id = 0; id < kept.size(); ++id)
    if (kept[id]) result.new_id_of_old[id] = result.vocab_size++;
  const IdMap map(result.new_id_of_old);

  json vocab = json::object();
  for (const auto& [token, id] : vocab_ids)
    if (kept[size_t(id)]) vocab[token] = result.new_id_of_old[size_t(id)];
  json kept_merges = json::array();
  const auto is_kept = [&](const std::string& token) { return kept[size_t(vocab_ids.at(token))]; };
  for (size_t i = 0; i < merge_parts.size(); ++i) {
    const auto& [left, right] = merge_parts[i];
    if (is_kept(left) && is_kept(right) && is_kept(left + right)) kept_merges.push_back(merges.node[i]);
  }
  result.full_merges = int64_t(merge_parts.size());
  result.merges = int64_t(kept_merges.size());

  json out = tokenizer_doc;
  out["model"]["vocab"] = std::move(vocab);
  out["model"]["merges"] = std::move(kept_merges);
  if (root.has("added_tokens"))
    for (size_t i = 0; i < tokenizer_doc["added_tokens"].size(); ++i)
      out["added_tokens"][i]["id"] = map(root["added_tokens"][i]["id"]);
  remap_post_processor(root.optional("post_processor"), out["post_processor"], map);
  if (root.has("padding") && root["padding"].has("pad_id")) out["padding"]["pad_id"] = map(root["padding"]["pad_id"]);

  fs::create_directories(out_dir);
  write_json(out_dir + "/tokenizer.json", out);

  const JsonAt config{config_doc, config_path, ""};
  if (config.has("added_tokens_decoder")) {
    json decoder = json::object();
    for (const auto& [key, entry] : config["added_tokens_decoder"].node.items()) {
      const json key_id = json::parse(key, nullptr, /*allow_exceptions=*/false);
      if (!key_id.is_number_integer())
        fail("{}: added_tokens_decoder key '{}' is not an id", config_path, key);
      decoder[std::to_string(map(JsonAt{key_id, config_path, "added_tokens_decoder." + key}))] = entry;
    }
    config_doc["added_tokens_decoder"] = std::move(decoder);
  }
  write_json(out_dir + "/tokenizer_config.json", config_doc);

  const std::string generation_path = tokenizer_dir + "/generation_config.json";
  if (fs::exists(generation_path)) {
    json generation = read_json(generation_path);
    const json original = generation;
    const JsonAt at{original, generation_path, ""};
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"})
      if (at.has(key)) generation[key] = map.ids(at[key]);
    write_json(out_dir + "/generation_config.json", generation);
  }
  const std::string added_path = tokenizer_dir + "/added_tokens.json";
  if (fs::exists(added_path)) {
    const json added = read_json(added_path);
    json remapped = json::object();
    for (const auto& [token, id] : added.items()) remapped[token] = map(JsonAt{id, added_path, token});
    write_json(out_dir + "/added_tokens.json", remapped);
  }
  for (const char* name : {"special_tokens_map.json", "chat_template.jinja"})
    if (fs::exists(tokenizer_dir + "/" + name))
      fs::copy_file(tokenizer_dir + "/" + name, out_dir + "/" + name, fs::copy_options::overwrite_existing);

  const BpeTokenizer trimmed = BpeTokenizer::from_file(out_dir + "/tokenizer.json");
  const auto token_strings = [](const BpeTokenizer& tok, const TokenIds& ids) {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const int64_t id : ids) tokens.push_back(tok.id_to_token(id));
    return tokens;
  };
  for (const std::string& text : texts) {
    ++result.texts_checked;
    if (token_strings(full, full.encode(text)) == token_strings(trimmed, trimmed.encode(text))) ++result.texts_identical;
  }
  return result;
}

}  // namespace turnrl
