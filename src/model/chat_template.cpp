#include "turnrl/model/chat_template.h"

#include "turnrl/core/error.h"
#include "turnrl/core/text.h"
#include "../core/utf8.h"

namespace turnrl {

namespace {

constexpr const char* kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Python's str.lstrip('\n') / rstrip('\n') / strip('\n').
std::string lstrip_newlines(const std::string& s) { return s.substr(std::min(s.find_first_not_of('\n'), s.size())); }
std::string rstrip_newlines(const std::string& s) {
  const size_t last = s.find_last_not_of('\n');
  return last == std::string::npos ? std::string() : s.substr(0, last + 1);
}

// Jinja's `trim` filter: Python's str.strip() (Unicode whitespace) on both ends.
std::string python_strip(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end) {
    const size_t length = detail::utf8_sequence_length(s, begin);
    if (!length || !detail::is_python_space(detail::utf8_decode_at(s, begin, length))) break;
    begin += length;
  }
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    const size_t length = detail::utf8_sequence_length(s, start);
    if (length != end - start || !detail::is_python_space(detail::utf8_decode_at(s, start, length))) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

class Renderer {
 public:
  void special(const char* name) { pieces_.push_back({name, true}); }
  void text(const std::string& text) {
    if (text.empty()) return;
    // Consecutive text is one run: HF tokenizes the rendered string between special tokens whole.
    if (!pieces_.empty() && !pieces_.back().special) pieces_.back().text += text;
    else pieces_.push_back({text, false});
  }
  ChatPieces take() { return std::move(pieces_); }

 private:
  ChatPieces pieces_;
};

void check_roles(const std::vector<ChatMessage>& messages) {
  for (const ChatMessage& m : messages) parse_role(m.role);
}

void chatml_turn(Renderer& r, const std::string& role, const std::string& content) {
  r.special("<|im_start|>");
  r.text(role + "\n" + content);
  r.special("<|im_end|>");
  r.text("\n");
}

// Qwen3's loop over messages. At the conversation's start a leading system message is rendered by
// the template's header, not by the loop.
void qwen3_messages(Renderer& r, const std::vector<ChatMessage>& messages, bool conversation_start) {
  // The last user message that is not a tool response: assistant turns after it keep reasoning.
  size_t last_query = messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].text;
    if (messages[i].role == "user" && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && !(conversation_start && i == 0))) {
      chatml_turn(r, m.role, m.text);
    } else if (m.role == "assistant") {
      std::string content = m.text, reasoning;
      const size_t close = content.find("</think>");
      if (close != std::string::npos) {
        // content.split('</think>')[-1].lstrip('\n') and
        // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
        const std::string before = rstrip_newlines(content.substr(0, close));
        const size_t open = before.rfind("<think>");
        reasoning = lstrip_newlines(open == std::string::npos ? before : before.substr(open + 7));
        content = lstrip_newlines(content.substr(content.rfind("</think>") + 8));
      }
      r.special("<|im_start|>");
      if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
        r.text("assistant\n<think>\n" + rstrip_newlines(lstrip_newlines(reasoning)) + "\n</think>\n\n" + lstrip_newlines(content));
      } else {
        r.text("assistant\n" + content);
      }
      r.special("<|im_end|>");
      r.text("\n");
    }
  }
}

void render_messages(Renderer& r, ChatTemplate t, const std::vector<ChatMessage>& messages, bool conversation_start) {
  switch (t) {
    case ChatTemplate::chatml:
      for (size_t i = 0; i < messages.size(); ++i)
        if (!(conversation_start && i == 0 && messages[i].role == "system")) chatml_turn(r, messages[i].role, messages[i].text);
      break;
    case ChatTemplate::qwen3:
      if (!messages.empty()) qwen3_messages(r, messages, conversation_start);
      break;
    case ChatTemplate::llama3:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (conversation_start && i == 0) r.special("<|begin_of_text|>");
        r.special("<|start_header_id|>");
        r.text(messages[i].role);
        r.special("<|end_header_id|>");
        r.text("\n\n" + python_strip(messages[i].text));
        r.special("<|eot_id|>");
      }
      break;
  }
}

void generation_prompt(Renderer& r, ChatTemplate t) {
  switch (t) {
    case ChatTemplate::chatml:
      r.special("<|im_start|>");
      r.text("assistant\n");
      break;
    case ChatTemplate::qwen3:
      r.special("<|im_start|>");
      r.text("assistant\n<think>\n\n</think>\n\n");  // enable_thinking=False
      break;
    case ChatTemplate::llama3:
      r.special("<|start_header_id|>");
      r.text("assistant");
      r.special("<|end_header_id|>");
      r.text("\n\n");
      break;
  }
}

}  // namespace

ChatTemplate parse_chat_template(const std::string& name) {
  if (name == "chatml") return ChatTemplate::chatml;
  if (name == "qwen3") return ChatTemplate::qwen3;
  if (name == "llama3") return ChatTemplate::llama3;
  fail("chat template '{}' is not one of chatml, qwen3, llama3", name);
}

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::chatml: return "chatml";
    case ChatTemplate::qwen3: return "qwen3";
    case ChatTemplate::llama3: return "llama3";
  }
  return "?";
}

std::optional<ChatTemplate> detect_chat_template(const std::string& jinja) {
  if (contains(jinja, "<|im_start|>")) {
    if (contains(jinja, "enable_thinking")) return ChatTemplate::qwen3;
    if (contains(jinja, kQwenDefaultSystem)) return ChatTemplate::chatml;
    return std::nullopt;
  }
  if (contains(jinja, "<|start_header_id|>") && !contains(jinja, "Cutting Knowledge Date")) return ChatTemplate::llama3;
  return std::nullopt;
}

ChatPieces render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  if (messages.empty()) fail("chat template {}: no messages to render", chat_template_name(t));
  check_roles(messages);
  Renderer r;
  if (t != ChatTemplate::llama3) {
    if (messages[0].role == "system") chatml_turn(r, "system", messages[0].text);
    else if (t == ChatTemplate::chatml) chatml_turn(r, "system", kQwenDefaultSystem);
  }
  render_messages(r, t, messages, /*conversation_start=*/true);
  if (add_generation_prompt) generation_prompt(r, t);
  return r.take();
}

ChatPieces render_chat_continuation(ChatTemplate t, const std::vector<ChatMessage>& messages, bool stopped) {
  check_roles(messages);
  Renderer r;
  if (!stopped) r.special(end_of_turn_token(t));
  if (t != ChatTemplate::llama3) r.text("\n");  // ChatML ends every turn with "<|im_end|>\n"
  render_messages(r, t, messages, /*conversation_start=*/false);
  generation_prompt(r, t);
  return r.take();
}

const char* end_of_turn_token(ChatTemplate t) { return t == ChatTemplate::llama3 ? "<|eot_id|>" : "<|im_end|>"; }

std::vector<std::string> template_special_tokens(ChatTemplate t) {
  if (t == ChatTemplate::llama3) return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  return {"<|im_start|>", "<|im_end|>"};
}

std::string chat_text(const ChatPieces& pieces) {
  std::string out;
  for (const ChatPiece& p : pieces) out += p.text;
  return out;
}

}  // namespace turnrl
