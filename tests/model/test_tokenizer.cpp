#include <catch2/catch.hpp>

#include "turnrl/core/error.h"
#include "turnrl/model/tokenizer.h"

using namespace turnrl;

TEST_CASE("tokenizer: byte-level round trip of UTF-8 and arbitrary bytes", "[model]") {
  const Tokenizer tok;
  const std::string text = "h\xC3\xA9llo \xE2\x98\x83 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x9A\x80\n\tend";  // héllo ☃ 日本 🚀
  const TokenIds ids = tok.encode(text);
  REQUIRE(ids.size() == text.size());  // one id per byte
  CHECK(ids[1] == 0xC3);
  CHECK(ids[2] == 0xA9);
  CHECK(tok.decode(ids) == text);

  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(char(b));
  const TokenIds all_ids = tok.encode(all_bytes);
  for (int b = 0; b < 256; ++b) CHECK(all_ids[size_t(b)] == b);
  CHECK(tok.decode(all_ids) == all_bytes);
  CHECK(tok.encode("").empty());
}

TEST_CASE("tokenizer: special tokens have fixed ids and are parsed only on request", "[model]") {
  const Tokenizer tok;
  CHECK(tok.vocab_size() == 263);
  CHECK(tok.special_id("<|bos|>") == Tokenizer::kBos);
  CHECK(tok.special_id("<|eos|>") == Tokenizer::kEos);
  CHECK(tok.special_id("<|pad|>") == Tokenizer::kPad);
  CHECK(tok.special_id("<|system|>") == Tokenizer::kSystem);
  CHECK(tok.special_id("<|user|>") == Tokenizer::kUser);
  CHECK(tok.special_id("<|assistant|>") == Tokenizer::kAssistant);
  CHECK(tok.special_id("<|end_turn|>") == Tokenizer::kEndTurn);
  CHECK(tok.is_special(256));
  CHECK_FALSE(tok.is_special(255));
  CHECK_FALSE(tok.is_special(263));

  const std::string text = "a<|user|>b<|end_turn|><|x|>";
  // Plain encode keeps the names as bytes: environment text cannot inject a role header.
  CHECK(tok.encode(text).size() == text.size());
  const TokenIds parsed = tok.encode_with_special(text);
  const TokenIds expected = {'a', Tokenizer::kUser, 'b', Tokenizer::kEndTurn, '<', '|', 'x', '|', '>'};
  CHECK(parsed == expected);
  CHECK(tok.decode(parsed) == text);
  CHECK(tok.decode_text(parsed) == "ab<|x|>");
}

TEST_CASE("tokenizer: registered special tokens extend the vocabulary, longest match wins", "[model]") {
  Tokenizer tok;
  const int64_t plan = tok.add_special_token("<|plan|>");
  const int64_t tile = tok.add_special_token("<|plan|>tile");
  CHECK(plan == 263);
  CHECK(tile == 264);
  CHECK(tok.add_special_token("<|plan|>") == plan);  // idempotent
  CHECK(tok.vocab_size() == 265);
  const TokenIds expected = {plan, 'x', tile, 't'};
  CHECK(tok.encode_with_special("<|plan|>x<|plan|>tilet") == expected);
  CHECK(tok.decode(expected) == "<|plan|>x<|plan|>tilet");

  CHECK_THROWS_AS(tok.add_special_token(""), Error);
  CHECK_THROWS_WITH(tok.special_id("<|nope|>"), Catch::Contains("<|nope|>"));
  CHECK_THROWS_WITH(tok.decode({1, 265}), Catch::Contains("265"));
  CHECK_THROWS_AS(tok.decode({-1}), Error);
}

TEST_CASE("tokenizer: chat template masks exactly the assistant's tokens", "[model]") {
  const Tokenizer tok;
  const std::vector<Message> episode = {Message::system("S"), Message::user("hi"), Message::assistant("ok"),
                                        Message::user("again"), Message::assistant_tokens({'y', Tokenizer::kEndTurn})};
  const TemplatedEpisode e = apply_chat_template(tok, episode);
  const TokenIds expected = {Tokenizer::kBos,       Tokenizer::kSystem, 'S', Tokenizer::kEndTurn,
                             Tokenizer::kUser,      'h', 'i',           Tokenizer::kEndTurn,
                             Tokenizer::kAssistant, 'o', 'k',           Tokenizer::kEndTurn,
                             Tokenizer::kUser,      'a', 'g', 'a', 'i', 'n', Tokenizer::kEndTurn,
                             Tokenizer::kAssistant, 'y', Tokenizer::kEndTurn};
  REQUIRE(e.tokens == expected);
  const std::vector<uint8_t> mask = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1};
  CHECK(e.response_mask == mask);
  CHECK(tok.decode_text(e.tokens) == "Shiokagainy");
}

TEST_CASE("tokenizer: generation prompt plus generated tokens is the templated episode", "[model]") {
  const Tokenizer tok;
  std::vector<Message> episode = {Message::user("write a kernel")};
  const TokenIds prompt = generation_prompt(tok, episode);
  CHECK(prompt.back() == Tokenizer::kAssistant);
  const TokenIds generated = {'d', 'o', 'n', 'e', Tokenizer::kEndTurn};
  episode.push_back(Message::assistant_tokens(generated));
  const TemplatedEpisode e = apply_chat_template(tok, episode);
  TokenIds joined = prompt;
  joined.insert(joined.end(), generated.begin(), generated.end());
  CHECK(e.tokens == joined);
  for (size_t i = 0; i < e.tokens.size(); ++i) CHECK(e.response_mask[i] == (i >= prompt.size() ? 1 : 0));
  // A truncated turn (no <|end_turn|>) stays truncated: nothing is appended to token messages.
  const TemplatedEpisode t = apply_chat_template(tok, {Message::user("q"), Message::assistant_tokens({'a', 'b'})});
  CHECK(t.tokens.back() == 'b');
  CHECK_THROWS_WITH(apply_chat_template(tok, {Message::assistant_tokens({9999})}), Catch::Contains("9999"));
}
