// `turnrl trim-vocab`: a tokenizer folder cut down to the tokens a corpus needs (model/vocab_trim.h),
// for a small model whose embedding and output projection are then that much smaller.
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/model/hf_tokenizer.h"
#include "turnrl/model/vocab_trim.h"
#include "turnrl/rl/chat_codec.h"
#include "turnrl/rl/sft_data.h"

namespace turnrl::cli {
namespace {

struct TrimVocabArgs {
  std::string tokenizer, out;
  std::vector<std::string> texts;
};

bool is_chat_jsonl(const std::string& path) { return path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0; }

// Each conversation's tokens as `codec` builds them for SFT and RL (chat_codec.h), as token strings,
// so that the input and the trimmed tokenizer's are comparable.
std::vector<std::string> conversation_token_strings(const ChatCodec& codec, const HfChatTokenizer& tokenizer,
                                                    const ChatExample& conversation) {
  std::vector<std::string> tokens;
  for (const int64_t id : conversation_tokens(codec, conversation.messages).tokens)
    tokens.push_back(tokenizer.tokenizer().id_to_token(id));
  return tokens;
}

void run_trim_vocab(const TrimVocabArgs& a) {
  const auto full = load_hf_chat_tokenizer(a.tokenizer);
  const ChatCodec full_codec(full, /*max_new_tokens=*/1);
  std::vector<std::string> texts;
  std::vector<int64_t> keep_ids;
  std::vector<ChatExample> conversations;
  for (const std::string& file : a.texts) {
    if (!is_chat_jsonl(file)) {
      texts.push_back(read_file(file, "the text file"));
      continue;
    }
    // The message texts (what RL encodes alone: an action, a feedback message) and the rendered
    // conversation, whose text runs join role headers to the contents.
    for (ChatExample& conversation : read_chat_jsonl(file)) {
      for (const ChatMessage& message : conversation.messages) texts.push_back(message.text);
      const ConversationTokens tokens = conversation_tokens(full_codec, conversation.messages);
      keep_ids.insert(keep_ids.end(), tokens.tokens.begin(), tokens.tokens.end());
      conversations.push_back(std::move(conversation));
    }
  }
  const TrimmedVocabulary trimmed = trim_vocabulary(a.tokenizer, texts, a.out, keep_ids);

  const auto written = load_hf_chat_tokenizer(a.out);
  const ChatCodec written_codec(written, /*max_new_tokens=*/1);
  int64_t conversations_identical = 0;
  for (const ChatExample& conversation : conversations)
    if (conversation_token_strings(full_codec, *full, conversation) ==
        conversation_token_strings(written_codec, *written, conversation))
      ++conversations_identical;
  fmt::print(
      "wrote {}: {} of {} ids kept ({:.1f}%), {} of {} merges\n"
      "check: {} of {} texts and {} of {} chat renderings re-encode to the same tokens\n",
      a.out, trimmed.vocab_size, trimmed.full_vocab_size, 100.0 * double(trimmed.vocab_size) / double(trimmed.full_vocab_size),
      trimmed.merges, trimmed.full_merges, trimmed.texts_identical, trimmed.texts_checked, conversations_identical,
      conversations.size());
  if (trimmed.texts_identical != trimmed.texts_checked || conversations_identical != int64_t(conversations.size()))
    throw CLI::RuntimeError(1);
}

}  // namespace

void add_trim_vocab_command(CLI::App& app) {
  auto a = std::make_shared<TrimVocabArgs>();
  CLI::App* c = app.add_subcommand("trim-vocab", "Cut a BPE tokenizer folder down to the tokens a corpus needs");
  c->add_option("--tokenizer", a->tokenizer, "Tokenizer folder to trim (tokenizer.json, tokenizer_config.json)")
      ->required();
  c->add_option("--texts", a->texts,
                "Corpus files: chat JSON Lines (*.jsonl, as make-sft-data writes: the messages and their chat "
                "rendering) or plain text files (each one text)")
      ->required();
  c->add_option("--out", a->out, "The folder to write the trimmed tokenizer files to")->required();
  c->footer(
      "Keeps the 256 byte-level tokens, every added token and the corpus's tokens, closed under the merges\n"
      "that form them, with ids renumbered densely in their old order. The corpus then tokenizes exactly as\n"
      "with the full tokenizer (checked and printed: a mismatch exits 1); any other text, such as new\n"
      "feedback at RL time, still tokenizes and decodes back, in more and shorter tokens\n"
      "(docs/model.md, \"Vocabulary trimming\").\n\n"
      "Example:\n"
      "  turnrl make-sft-data --out runs/sft_cpu\n"
      "  turnrl trim-vocab --tokenizer .deps/hf-tokenizers/qwen3 --texts runs/sft_cpu/train.jsonl "
      "runs/sft_cpu/validation.jsonl --out models/qwen3-code-tokenizer\n"
      "  turnrl init-model --out models/qwen3-tiny --preset qwen3-tiny --seed 1 --tokenizer models/qwen3-code-tokenizer");
  c->callback([a] { run_trim_vocab(*a); });
}

}  // namespace turnrl::cli
