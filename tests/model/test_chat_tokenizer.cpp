#include <catch2/catch.hpp>

#include "turnrl/core/error.h"
#include "turnrl/model/chat_tokenizer.h"

using namespace turnrl;

TEST_CASE("byte chat tokenizer: token-in/token-out turns equal the template of the whole episode", "[model]") {
  const ByteChatTokenizer chat;
  const std::vector<ChatMessage> first = {{"system", "sys"}, {"user", "write relu"}};
  TokenIds seq = chat.render_prompt(first);
  // The policy's first turn, ended by its stop token.
  TokenIds generated = chat.encode("```cpp\nx\n```");
  generated.push_back(chat.stop_tokens().at(0));
  seq.insert(seq.end(), generated.begin(), generated.end());
  const TokenIds cont = chat.render_continuation({{"user", "mismatch"}}, /*stopped=*/true);
  seq.insert(seq.end(), cont.begin(), cont.end());

  const TokenIds whole = generation_prompt(
      chat.tokenizer(), {Message::system("sys"), Message::user("write relu"), Message::assistant("```cpp\nx\n```"),
                         Message::user("mismatch")});
  CHECK(seq == whole);
}

TEST_CASE("byte chat tokenizer: a truncated turn is closed by the continuation", "[model]") {
  const ByteChatTokenizer chat;
  const TokenIds cont = chat.render_continuation({{"user", "u"}}, /*stopped=*/false);
  REQUIRE(cont.size() == 5);  // <|end_turn|> <|user|> 'u' <|end_turn|> <|assistant|>
  CHECK(cont[0] == Tokenizer::kEndTurn);
  CHECK(cont[1] == Tokenizer::kUser);
  CHECK(cont[2] == 'u');
  CHECK(cont.back() == Tokenizer::kAssistant);
  CHECK(chat.decode({'h', 'i', Tokenizer::kEndTurn}) == "hi");
  CHECK(chat.decode({'h', 'i', Tokenizer::kEndTurn}, false) == "hi<|end_turn|>");
}

TEST_CASE("byte chat tokenizer: an unknown role is an error naming it", "[model]") {
  const ByteChatTokenizer chat;
  CHECK_THROWS_WITH(chat.render_prompt({{"tool", "x"}}), Catch::Contains("'tool'") && Catch::Contains("system"));
}
