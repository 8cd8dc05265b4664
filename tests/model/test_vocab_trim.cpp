// Vocabulary trimming (model/vocab_trim.h): on a hand-made byte-level tokenizer whose kept set is
// worked out by hand, and on the real Qwen3 and Llama-3 tokenizers, where the trimmed tokenizer
// must give the corpus the full one's tokens, any other text valid tokens, and a chat tokenizer and
// an init-model config that work.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "model/hf_tokenizer_files.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/model/chat_template.h"
#include "turnrl/model/hf_config.h"
#include "turnrl/model/hf_init.h"
#include "turnrl/model/hf_tokenizer.h"
#include "turnrl/model/vocab_trim.h"

using namespace turnrl;
using nlohmann::json;

namespace {

// A scratch folder under /tmp, removed with its content.
struct ScratchFolder {
  std::string path;
  ScratchFolder() {
    char name[] = "/tmp/turnrl_vocab_trim_XXXXXX";
    path = mkdtemp(name);
  }
  ~ScratchFolder() { remove_tree(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  void write(const std::string& file, const json& content) const { std::ofstream(path + "/" + file) << content.dump(); }
};

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

// GPT-2's byte -> symbol table, written out independently of the library: printable Latin-1 bytes
// are themselves, the other 68 take U+0100.. in byte order.
std::vector<std::string> gpt2_byte_symbols() {
  std::vector<std::string> symbols(256);
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int code_point = printable ? b : 256 + next++;
    std::string utf8;
    if (code_point < 0x80) {
      utf8 += char(code_point);
    } else {
      utf8 += char(0xC0 | (code_point >> 6));
      utf8 += char(0x80 | (code_point & 0x3F));
    }
    symbols[size_t(b)] = utf8;
  }
  return symbols;
}

// A byte-level BPE folder: the 256 byte symbols (ids 0..255), ab 256, bc 257, abc 258, xy 259,
// Ġa 260, the special <|end|> 261; merges (ranks 0..5) a b, b c, ab c, a bc, x y, Ġ a, as "a b"
// strings or [a, b] pairs; <|end|> named by id in a TemplateProcessing post-processor, padding,
// tokenizer_config's added_tokens_decoder, generation_config and added_tokens.json.
void write_small_tokenizer(const ScratchFolder& dir, bool pair_merges) {
  json vocab = json::object();
  const std::vector<std::string> bytes = gpt2_byte_symbols();
  for (size_t b = 0; b < 256; ++b) vocab[bytes[b]] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {{"a", "b"},  {"b", "c"}, {"ab", "c"},
                                                                   {"a", "bc"}, {"x", "y"}, {"Ġ", "a"}};
  json merge_list = json::array();
  int64_t id = 256;
  for (const auto& [left, right] : merges) {
    if (!vocab.contains(left + right)) vocab[left + right] = id++;
    merge_list.push_back(pair_merges ? json::array({left, right}) : json(left + " " + right));
  }
  const json end_token = {{"id", 261},          {"content", "<|end|>"}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false},    {"normalized", false},  {"special", true}};
  const json template_processing = {
      {"type", "TemplateProcessing"},
      {"single", json::array({json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              json{{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens",
       {{"<|end|>", {{"id", "<|end|>"}, {"ids", json::array({261})}, {"tokens", json::array({"<|end|>"})}}}}}};
  dir.write("tokenizer.json",
            json{{"version", "1.0"},
                 {"truncation", nullptr},
                 {"padding", {{"pad_id", 261}, {"pad_token", "<|end|>"}}},
                 {"added_tokens", json::array({end_token})},
                 {"normalizer", nullptr},
                 {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                 {"post_processor",
                  {{"type", "Sequence"},
                   {"processors", json::array({json{{"type", "ByteLevel"}, {"trim_offsets", false}}, template_processing})}}},
                 {"decoder", {{"type", "ByteLevel"}}},
                 {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}});
  dir.write("tokenizer_config.json",
            json{{"added_tokens_decoder", {{"261", {{"content", "<|end|>"}, {"special", true}}}}},
                 {"eos_token", "<|end|>"},
                 {"chat_template", "{{ messages }}"}});
  dir.write("generation_config.json", json{{"bos_token_id", 261}, {"eos_token_id", json::array({261})}});
  dir.write("added_tokens.json", json{{"<|end|>", 261}});
  dir.write("special_tokens_map.json", json{{"eos_token", "<|end|>"}});
}

std::vector<std::string> token_strings(const BpeTokenizer& tok, const TokenIds& ids) {
  std::vector<std::string> out;
  for (const int64_t id : ids) out.push_back(tok.id_to_token(id));
  return out;
}

// Texts of a code-writing corpus: code with non-ASCII text, runs of spaces, tabs and newlines,
// special-token names inside text, and a chat rendering of `chat_template`.
std::vector<std::string> corpus_texts(ChatTemplate chat_template) {
  const std::vector<ChatMessage> conversation = {
      {"system", "You write fast CPU kernels."},
      {"user", "Write relu_bias: y = max(x + b, 0) for a [rows, cols] float32 tensor."},
      {"assistant", "```cpp\nfor (int i = 0; i < n; ++i) y[i] = std::max(x[i] + b[i % cols], 0.0f);\n```"},
      {"user", "Correct, speedup 1.31x over the reference. Make it faster."}};
  return {
      "// ReLU — y ≥ 0, déjà vu: 日本語のコメント 🚀\nvoid relu(const float* x, float* y, int n) {\n"
      "    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;\n}\n",
      "a  b   c\t\t\td\n\n\n    e\r\n      \n        }",
      "text with <|im_start|>user and <|begin_of_text|> and <think>a thought</think> inside <|eot_id|>",
      chat_text(render_chat(chat_template, conversation, /*add_generation_prompt=*/true)),
  };
}

// The real tokenizer of `family` trimmed to corpus_texts.
struct RealTrim {
  std::vector<std::string> texts;
  ScratchFolder out;
  TrimmedVocabulary result;
  BpeTokenizer full, trimmed;

  explicit RealTrim(const std::string& family)
      : texts(corpus_texts(family == "llama3" ? ChatTemplate::llama3 : ChatTemplate::qwen3)),
        result(trim_vocabulary(test::hf_tokenizer_dir(family), texts, out.path)),
        full(BpeTokenizer::from_file(test::hf_tokenizer_dir(family) + "/tokenizer.json")),
        trimmed(BpeTokenizer::from_file(out / "tokenizer.json")) {}
};

// Once per test run: trimming reads the 9-11 MB tokenizer.json.
const RealTrim& real_trim(const std::string& family) {
  static std::map<std::string, std::unique_ptr<RealTrim>> cache;
  auto it = cache.find(family);
  if (it == cache.end()) it = cache.emplace(family, std::make_unique<RealTrim>(family)).first;
  return *it->second;
}

}  // namespace

TEST_CASE("trim_vocabulary keeps the byte symbols, added tokens and the closure of the corpus's tokens under merges") {
  for (const bool pair_merges : {false, true}) {
    INFO("merges as " << (pair_merges ? "[a, b] pairs" : "\"a b\" strings"));
    ScratchFolder in, out;
    write_small_tokenizer(in, pair_merges);
    // "abc" encodes to the one token abc (a b, then ab c). Merges forming abc: (ab, c) and (a, bc),
    // so ab, bc, and through them a, b, c are kept; xy and Ġa are not.
    const TrimmedVocabulary t = trim_vocabulary(in.path, {"abc"}, out.path);
    CHECK(t.full_vocab_size == 262);
    CHECK(t.vocab_size == 256 + 3 + 1);
    CHECK(t.full_merges == 6);
    CHECK(t.merges == 4);
    CHECK(t.texts_checked == 1);
    CHECK(t.texts_identical == 1);
    REQUIRE(t.new_id_of_old.size() == 262);
    for (int64_t id = 0; id < 256; ++id) CHECK(t.new_id_of_old[size_t(id)] == id);
    CHECK(t.new_id_of_old[256] == 256);  // ab
    CHECK(t.new_id_of_old[257] == 257);  // bc
    CHECK(t.new_id_of_old[258] == 258);  // abc
    CHECK(t.new_id_of_old[259] == -1);   // xy
    CHECK(t.new_id_of_old[260] == -1);   // Ġa
    CHECK(t.new_id_of_old[261] == 259);  // <|end|>, after the vocabulary

    const json written = read_json(out / "tokenizer.json");
    const json& model = written.at("model");
    CHECK(model.at("vocab").size() == 259);
    CHECK(model.at("vocab").at("abc") == 258);
    CHECK(!model.at("vocab").contains("xy"));
    const json expected_merges = pair_merges ? json::array({json::array({"a", "b"}), json::array({"b", "c"}),
                                                            json::array({"ab", "c"}), json::array({"a", "bc"})})
                                             : json::array({"a b", "b c", "ab c", "a bc"});
    CHECK(model.at("merges") == expected_merges);
    CHECK(written.at("added_tokens").at(0).at("id") == 259);
    CHECK(written.at("added_tokens").at(0).at("content") == "<|end|>");
    CHECK(written.at("padding").at("pad_id") == 259);
    CHECK(written.at("post_processor").at("processors").at(1).at("special_tokens").at("<|end|>").at("ids") ==
          json::array({259}));
    const json config = read_json(out / "tokenizer_config.json");
    CHECK(config.at("added_tokens_decoder").size() == 1);
    CHECK(config.at("added_tokens_decoder").at("259").at("content") == "<|end|>");
    CHECK(config.at("eos_token") == "<|end|>");  // named by string: unchanged
    CHECK(read_json(out / "generation_config.json") == json{{"bos_token_id", 259}, {"eos_token_id", json::array({259})}});
    CHECK(read_json(out / "added_tokens.json") == json{{"<|end|>", 259}});
    CHECK(read_json(out / "special_tokens_map.json") == json{{"eos_token", "<|end|>"}});

    // Text outside the corpus: xy is gone, so x and y; " abc" is Ġ abc in both (a b wins over Ġ a).
    const BpeTokenizer full = BpeTokenizer::from_file(in / "tokenizer.json");
    const BpeTokenizer trimmed = BpeTokenizer::from_file(out / "tokenizer.json");
    CHECK(token_strings(full, full.encode("xy abc")) == std::vector<std::string>{"xy", "Ġ", "abc"});
    CHECK(token_strings(trimmed, trimmed.encode("xy abc")) == std::vector<std::string>{"x", "y", "Ġ", "abc"});
    CHECK(trimmed.encode("xy abc<|end|>", true).back() == 259);
    CHECK(trimmed.decode(trimmed.encode("xy abc")) == "xy abc");
  }
}

TEST_CASE("trim_vocabulary keeps the ids of keep_ids and checks their range") {
  ScratchFolder in, out;
  write_small_tokenizer(in, false);
  const TrimmedVocabulary t = trim_vocabulary(in.path, {}, out.path, {259});  // xy, and so x and y
  CHECK(t.vocab_size == 256 + 1 + 1);
  CHECK(t.merges == 1);
  CHECK(t.new_id_of_old[259] == 256);
  CHECK_THROWS_WITH(trim_vocabulary(in.path, {}, out.path, {262}),
                    Catch::Contains("keep_ids holds 262") && Catch::Contains("(0..261)"));
  CHECK_THROWS_WITH(trim_vocabulary(in.path, {}, out.path, {-1}), Catch::Contains("keep_ids holds -1"));
}

TEST_CASE("trim_vocabulary refuses a missing folder, a tokenizer it cannot trim and writing over its input") {
  ScratchFolder in, out;
  CHECK_THROWS_WITH(trim_vocabulary(in / "absent", {"x"}, out.path),
                    Catch::Contains(in / "absent") && Catch::Contains("does not exist"));
  CHECK_THROWS_WITH(trim_vocabulary(in.path, {"x"}, out.path), Catch::Contains(in / "tokenizer.json"));

  write_small_tokenizer(in, false);
  CHECK_THROWS_WITH(trim_vocabulary(in.path, {"x"}, in.path), Catch::Contains("is the input folder"));

  json doc = read_json(in / "tokenizer.json");
  doc["model"]["type"] = "WordPiece";
  in.write("tokenizer.json", doc);
  CHECK_THROWS_WITH(trim_vocabulary(in.path, {"x"}, out.path),
                    Catch::Contains(in / "tokenizer.json") && Catch::Contains("model.type") && Catch::Contains("WordPiece"));

  // A BPE vocabulary without every byte symbol could not encode other text after trimming.
  doc["model"]["type"] = "BPE";
  doc["model"]["vocab"].erase("Ā");  // byte 0x00
  in.write("tokenizer.json", doc);
  CHECK_THROWS_WITH(trim_vocabulary(in.path, {"x"}, out.path),
                    Catch::Contains(in / "tokenizer.json") && Catch::Contains("byte-level symbol 'Ā'"));
}

TEST_CASE("a trimmed Qwen3 or Llama-3 tokenizer gives the corpus the full tokenizer's tokens") {
  for (const std::string family : {"qwen3", "llama3"}) {
    INFO(family);
    const RealTrim& t = real_trim(family);
    CHECK(t.result.vocab_size < t.result.full_vocab_size / 20);  // a few thousand ids of 128k-152k
    CHECK(t.result.texts_identical == t.result.texts_checked);
    CHECK(t.result.texts_checked == int64_t(t.texts.size()));
    for (const std::string& text : t.texts)
      for (const bool parse_special : {false, true}) {
        INFO(text << " (parse_special " << parse_special << ")");
        CHECK(token_strings(t.trimmed, t.trimmed.encode(text, parse_special)) ==
              token_strings(t.full, t.full.encode(text, parse_special)));
      }
  }
}

TEST_CASE("text outside the corpus round-trips through a trimmed tokenizer in kept ids") {
  const std::string outside =
      "Совсем другой текст: ∮ E·da = Q/ε₀, naïve café, 42 ≠ 43, tabs\t\tand\u00a0nbsp, emoji 🧪🧬, "
      "__global__ void never_seen_identifier_xyz(double* z) {}\n";
  for (const std::string family : {"qwen3", "llama3"}) {
    INFO(family);
    const RealTrim& t = real_trim(family);
    const TokenIds ids = t.trimmed.encode(outside);
    CHECK(t.trimmed.decode(ids) == outside);
    for (const int64_t id : ids) CHECK(id < t.result.vocab_size);
    CHECK(ids.size() > t.full.encode(outside).size());  // shorter tokens
  }
}

TEST_CASE("a trimmed tokenizer's ids are dense, in the old order, with the added tokens after the vocabulary") {
  for (const std::string family : {"qwen3", "llama3"}) {
    INFO(family);
    const RealTrim& t = real_trim(family);
    const json written = read_json(t.out / "tokenizer.json");
    std::set<int64_t> ids;
    int64_t largest_vocab_id = -1;
    for (const auto& [token, id] : written.at("model").at("vocab").items()) {
      ids.insert(id.get<int64_t>());
      largest_vocab_id = std::max(largest_vocab_id, id.get<int64_t>());
    }
    for (const json& added : written.at("added_tokens")) {
      ids.insert(added.at("id").get<int64_t>());
      CHECK(added.at("id").get<int64_t>() > largest_vocab_id);
    }
    CHECK(int64_t(ids.size()) == t.result.vocab_size);
    CHECK(*ids.begin() == 0);
    CHECK(*ids.rbegin() == t.result.vocab_size - 1);
    CHECK(t.trimmed.vocab_size() == t.result.vocab_size);
    CHECK(t.trimmed.added_tokens().size() == t.full.added_tokens().size());

    int64_t previous_new = -1;
    for (int64_t old_id = 0; old_id < t.result.full_vocab_size; ++old_id) {
      const int64_t new_id = t.result.new_id_of_old[size_t(old_id)];
      if (new_id < 0) continue;
      CHECK(new_id == previous_new + 1);
      CHECK(t.trimmed.id_to_token(new_id) == t.full.id_to_token(old_id));
      CHECK(t.trimmed.is_special(new_id) == t.full.is_special(old_id));
      previous_new = new_id;
    }
    for (const std::string& symbol : gpt2_byte_symbols()) CHECK(t.trimmed.token_to_id(symbol).has_value());

    // The merges kept are a subsequence of the full file's, each over kept tokens.
    const json full_doc = read_json(test::hf_tokenizer_dir(family) + "/tokenizer.json");
    const json& full_merges = full_doc.at("model").at("merges");
    const json& kept_merges = written.at("model").at("merges");
    CHECK(int64_t(kept_merges.size()) == t.result.merges);
    size_t position = 0;
    for (const json& merge : kept_merges) {
      while (position < full_merges.size() && full_merges[position] != merge) ++position;
      CHECK(position < full_merges.size());
    }
  }
}

TEST_CASE("a trimmed folder loads as a chat tokenizer with the same stop tokens, pad and renderings") {
  for (const std::string family : {"qwen3", "llama3"}) {
    INFO(family);
    const RealTrim& t = real_trim(family);
    const auto full = load_hf_chat_tokenizer(test::hf_tokenizer_dir(family));
    const auto trimmed = load_hf_chat_tokenizer(t.out.path);
    CHECK(trimmed->chat_template() == full->chat_template());
    CHECK(token_strings(trimmed->tokenizer(), trimmed->stop_tokens()) == token_strings(full->tokenizer(), full->stop_tokens()));
    CHECK(trimmed->tokenizer().id_to_token(trimmed->pad_id()) == full->tokenizer().id_to_token(full->pad_id()));
    const std::vector<ChatMessage> prompt = {{"user", "Write relu_bias: y = max(x + b, 0) for a [rows, cols] float32 tensor."}};
    const TokenIds rendered = trimmed->render_prompt(prompt);
    CHECK(token_strings(trimmed->tokenizer(), rendered) == token_strings(full->tokenizer(), full->render_prompt(prompt)));
    CHECK(trimmed->decode(rendered, false) == full->decode(full->render_prompt(prompt), false));
  }
}

TEST_CASE("init-model's config for a trimmed tokenizer names bos and eos ids inside its vocabulary") {
  for (const auto& [family, preset] : {std::pair{"qwen3", "qwen3-tiny"}, std::pair{"llama3", "llama3-tiny"}}) {
    INFO(family);
    const RealTrim& t = real_trim(family);
    const HfPresetVocab vocab = hf_preset_vocab(preset, t.trimmed);
    CHECK(vocab.size == t.result.vocab_size);
    const HFConfig config = parse_hf_config(hf_preset_config(preset, vocab), preset);
    CHECK(config.vocab_size == t.result.vocab_size);
    const char* bos = std::string(family) == "qwen3" ? "<|endoftext|>" : "<|begin_of_text|>";
    const char* eos = std::string(family) == "qwen3" ? "<|endoftext|>" : "<|end_of_text|>";
    CHECK(config.bos_token_id == *t.trimmed.token_to_id(bos));
    CHECK(config.eos_token_ids == std::vector<int64_t>{*t.trimmed.token_to_id(eos)});
    CHECK(config.bos_token_id < config.vocab_size);
  }
}
