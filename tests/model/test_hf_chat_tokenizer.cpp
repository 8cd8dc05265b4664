// Chat templates (model/chat_template.h) and HF tokenizer folders as ChatTokenizers
// (model/hf_tokenizer.h), against renderings of the real templates by jinja2 (the engine
// transformers' apply_chat_template uses) tokenized by transformers.js, written by
// scripts/dev/make_tokenizer_fixtures.mjs. ChatML is Qwen2.5's template on the Qwen3 vocabulary.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <catch2/catch.hpp>

#include "model/hf_tokenizer_files.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/model/hf_tokenizer.h"

using namespace turnrl;
using nlohmann::json;

namespace {

const HfChatTokenizer& real_chat(const std::string& template_name) {
  static std::map<std::string, std::shared_ptr<HfChatTokenizer>> cache;
  auto it = cache.find(template_name);
  if (it == cache.end()) {
    const std::string dir = test::hf_tokenizer_dir(template_name == "llama3" ? "llama3" : "qwen3");
    it = cache.emplace(template_name, load_hf_chat_tokenizer(dir, HfTokenizerOptions().template_name(template_name))).first;
  }
  return *it->second;
}

std::vector<ChatMessage> messages_of(const json& list) {
  std::vector<ChatMessage> out;
  for (const json& m : list) out.push_back({m.at("role"), m.at("content")});
  return out;
}

TokenIds concat(TokenIds a, const TokenIds& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A scratch model folder: the real tokenizer.json (linked) and the given config files.
struct ScratchFolder {
  std::string path;
  explicit ScratchFolder(const std::string& real_dir) {
    char name[] = "/tmp/turnrl_hf_tokenizer_XXXXXX";
    path = mkdtemp(name);
    std::filesystem::create_symlink(real_dir + "/tokenizer.json", path + "/tokenizer.json");
  }
  ~ScratchFolder() { remove_tree(path); }
  void write(const std::string& file, const json& content) const { std::ofstream(path + "/" + file) << content.dump(); }
};

json real_config(const std::string& name) {
  std::ifstream in(test::hf_tokenizer_dir(name) + "/tokenizer_config.json");
  return json::parse(in);
}

}  // namespace

TEST_CASE("chat templates: renderings and ids equal the real templates (jinja2) for every fixture conversation", "[model]") {
  const json fixture = test::tokenizer_fixture("chat_fixtures.json");
  REQUIRE(fixture.at("cases").size() == 27);
  for (const json& c : fixture.at("cases")) {
    const HfChatTokenizer& chat = real_chat(c.at("template"));
    const std::vector<ChatMessage> messages = messages_of(c.at("messages"));
    INFO(c.at("template").get<std::string>() << ": " << c.at("messages").dump());
    CHECK(chat_text(render_chat(chat.chat_template(), messages, true)) == c.at("text").get<std::string>());
    const TokenIds ids = chat.render_prompt(messages);
    const TokenIds expected = c.at("ids").get<TokenIds>();
    if (c.at("messages").dump().find("<|im_end|>") == std::string::npos) {
      CHECK(ids == expected);
    } else {
      // HF tokenizes the rendered string with special-token parsing, so a user's "<|im_end|>" or
      // "<|eot_id|>" becomes a real turn end (prompt injection); turnrl keeps it text: one turn end
      // fewer, and the same text.
      const int64_t end_of_turn = *chat.tokenizer().token_to_id(end_of_turn_token(chat.chat_template()));
      CHECK(std::count(expected.begin(), expected.end(), end_of_turn) == std::count(ids.begin(), ids.end(), end_of_turn) + 1);
      CHECK(chat.decode(ids, false) == chat.decode(expected, false));
    }
  }
}

TEST_CASE("chat templates: token-in/token-out turns equal the re-rendered conversation for ChatML and Llama-3", "[model]") {
  for (const std::string name : {"chatml", "llama3"}) {
    const HfChatTokenizer& chat = real_chat(name);
    const std::string answer = "```cpp\nint x;\n```";
    TokenIds generated = chat.encode(answer);
    generated.push_back(chat.stop_tokens().front());
    const TokenIds episode = concat(concat(chat.render_prompt({{"user", "first"}}), generated),
                                    chat.render_continuation({{"user", "Compile error: x unused.\nTry again."}}, true));
    const TokenIds whole = chat.render_prompt({{"user", "first"}, {"assistant", answer}, {"user", "Compile error: x unused.\nTry again."}});
    INFO(name);
    CHECK(episode == whole);
    // A truncated turn is closed by the continuation.
    const TokenIds truncated = chat.render_continuation({{"user", "u"}}, false);
    CHECK(truncated.front() == chat.stop_tokens().front());
    CHECK(concat(chat.encode(answer), truncated) == concat(generated, chat.render_continuation({{"user", "u"}}, true)));
  }
}

TEST_CASE("chat templates: Qwen3 token-in/token-out keeps the generated empty think block that a re-render drops", "[model]") {
  const HfChatTokenizer& chat = real_chat("qwen3");
  TokenIds generated = chat.encode("A1");
  generated.push_back(chat.stop_tokens().front());
  const TokenIds episode =
      concat(concat(chat.render_prompt({{"user", "q1"}}), generated), chat.render_continuation({{"user", "q2"}}, true));
  // Hand-written from Qwen3's template: the first turn's generation prompt carried the empty
  // think block, and the sequence keeps it.
  CHECK(chat.decode(episode, false) ==
        "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA1<|im_end|>\n"
        "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // Re-rendering the conversation strips reasoning from earlier assistant turns.
  CHECK(chat_text(render_chat(ChatTemplate::qwen3, {{"user", "q1"}, {"assistant", "<think>\n\n</think>\n\nA1"}, {"user", "q2"}}, true)) ==
        "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_CASE("hf tokenizer folders: stop tokens and pad from the tokenizer and generation configs", "[model]") {
  // Qwen3: <|im_end|> (end of turn, eos_token), <|endoftext|>; pad_token <|endoftext|>.
  CHECK(real_chat("qwen3").stop_tokens() == std::vector<int64_t>{151645, 151643});
  CHECK(real_chat("qwen3").pad_id() == 151643);
  // Llama-3: <|eot_id|> (end of turn), <|end_of_text|> (eos_token); no pad_token, so eos.
  CHECK(real_chat("llama3").stop_tokens() == std::vector<int64_t>{128009, 128001});
  CHECK(real_chat("llama3").pad_id() == 128001);
  CHECK(real_chat("llama3").vocab_size() == 128256);

  ScratchFolder folder(test::hf_tokenizer_dir("qwen3"));
  folder.write("tokenizer_config.json", real_config("qwen3"));
  folder.write("generation_config.json", json{{"eos_token_id", json::array({151643, 151644})}});
  CHECK(load_hf_chat_tokenizer(folder.path)->stop_tokens() == std::vector<int64_t>{151645, 151643, 151644});
  folder.write("generation_config.json", json{{"eos_token_id", 151999}});
  CHECK_THROWS_WITH(load_hf_chat_tokenizer(folder.path), Catch::Contains("stop token 151999 is outside the vocabulary"));
}

TEST_CASE("hf tokenizer folders: the template is recognised from its text, the model type or the option", "[model]") {
  CHECK(load_hf_chat_tokenizer(test::hf_tokenizer_dir("qwen3"))->chat_template() == ChatTemplate::qwen3);
  CHECK(load_chat_tokenizer(test::hf_tokenizer_dir("llama3"))->vocab_size() == 128256);
  CHECK(load_hf_chat_tokenizer(test::hf_tokenizer_dir("llama3"))->chat_template() == ChatTemplate::llama3);

  ScratchFolder folder(test::hf_tokenizer_dir("qwen3"));
  json config = real_config("qwen3");
  config["chat_template"] = "{{ messages }}";
  folder.write("tokenizer_config.json", config);
  CHECK_THROWS_WITH(load_hf_chat_tokenizer(folder.path),
                    Catch::Contains("tokenizer_config.json: chat_template: chat_template is none of the templates") &&
                        Catch::Contains("chatml, qwen3 or llama3"));
  CHECK(load_hf_chat_tokenizer(folder.path, HfTokenizerOptions().template_name("chatml"))->chat_template() == ChatTemplate::chatml);
  CHECK_THROWS_WITH(load_hf_chat_tokenizer(folder.path, HfTokenizerOptions().template_name("llama2")),
                    Catch::Contains("chat template 'llama2' is not one of chatml, qwen3, llama3"));
  // Llama-3.1's template (its "Cutting Knowledge Date" system block) is not reproduced.
  CHECK_FALSE(detect_chat_template("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023"));

  config.erase("chat_template");
  folder.write("tokenizer_config.json", config);
  folder.write("config.json", json{{"model_type", "qwen2"}});
  CHECK(load_hf_chat_tokenizer(folder.path)->chat_template() == ChatTemplate::chatml);
  folder.write("config.json", json{{"model_type", "mistral"}});
  CHECK_THROWS_WITH(load_hf_chat_tokenizer(folder.path), Catch::Contains("no chat_template"));
  // A template whose tokens the vocabulary lacks.
  CHECK_THROWS_WITH(load_hf_chat_tokenizer(folder.path, HfTokenizerOptions().template_name("llama3")),
                    Catch::Contains("the tokenizer has no token '<|begin_of_text|>'"));
}

TEST_CASE("chat templates: unknown roles and empty conversations are errors", "[model]") {
  CHECK_THROWS_WITH(real_chat("qwen3").render_prompt({{"tool", "x"}}), Catch::Contains("'tool'"));
  CHECK_THROWS_WITH(real_chat("llama3").render_prompt({}), Catch::Contains("no messages"));
}
