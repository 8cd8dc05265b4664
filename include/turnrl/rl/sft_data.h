#pragma once
// Supervised fine-tuning data: chat conversations in JSON Lines, one object a line with a
// "messages" list of {"role", "content"} (the format TRL's SFTTrainer and verl's multi-turn SFT
// dataset read; other keys are ignored), tokenised exactly as a ChatCodec episode holds them
// (chat_codec.h: conversation_tokens), so that SFT trains the tokens RL later scores. The loss
// mask is true on the assistant turns' text and stop tokens only.
//
//   auto rows = tokenize_conversations(read_chat_jsonl("train.jsonl"), codec, SFTDataConfig());
//   auto plan = epoch_micro_batches(rows.lengths(), 8, 64, seed, epoch);
//   SFTBatch b = collate(rows, plan[0], tokenizer.pad_id());
#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include "turnrl/model/chat_tokenizer.h"
#include "turnrl/rl/chat_codec.h"

namespace turnrl {

// The YAML `data:` section of `turnrl sft`.
struct SFTDataConfig {
  std::string train;                   // chat JSON Lines file
  std::string validation;              // held-out chat JSON Lines file; "" = none
  int64_t max_length = 1024;           // tokens per row (a conversation, or a pack of them)
  std::string truncation = "truncate"; // longer conversations: truncate (cut at max_length) | drop
  bool packing = false;                // concatenate conversations into rows of up to max_length tokens
  int64_t bucket_window = 64;          // sort by length within windows of this many rows of the shuffled order; 1 = off
};

// One conversation of a chat JSON Lines file.
struct ChatExample {
  std::vector<ChatMessage> messages;
  std::string source;  // "file:line", for error messages
};

// Every non-empty line of `file`. A line that is not a JSON object, lacks "messages", has a
// message that is not an object with string "role" ("system" | "user" | "assistant") and
// "content", or has no assistant message is an error naming file:line and the field.
std::vector<ChatExample> read_chat_jsonl(const std::string& file);

// Token rows with their loss masks (1 on the assistant's tokens), and what shaping them cost.
struct SFTRows {
  std::vector<TokenIds> tokens;
  std::vector<std::vector<uint8_t>> loss_mask;
  int64_t conversations = 0;  // read
  int64_t truncated = 0;      // cut at max_length (truncation: truncate)
  int64_t dropped = 0;        // longer than max_length (truncation: drop), or truncated to no assistant token
  int64_t packed_rows = 0;    // rows after packing (packing: true), else 0

  size_t size() const { return tokens.size(); }
  std::vector<int64_t> lengths() const;
  // Assistant tokens of row i (the tokens the loss is over).
  int64_t loss_tokens(size_t i) const;
};

// The rows of `examples` under `data` (max_length, truncation, packing). Packing joins whole
// conversations in order while they fit (TRL's classic packing: a later conversation of a row
// attends to the earlier ones; the loss stays on the assistant tokens).
SFTRows tokenize_conversations(const std::vector<ChatExample>& examples, const ChatCodec& codec,
                               const SFTDataConfig& data);

// The micro-batches of epoch `epoch`: a permutation of the rows seeded by (seed, epoch), sorted by
// length within consecutive windows of `bucket_window` rows (so a micro-batch pads little),
// cut into micro-batches of `micro_batch_size` rows whose order is shuffled again. Each entry holds
// row indices. Deterministic in (lengths, sizes, seed, epoch).
std::vector<std::vector<int64_t>> epoch_micro_batches(const std::vector<int64_t>& lengths, int64_t micro_batch_size,
                                                      int64_t bucket_window, uint64_t seed, int64_t epoch);

// Rows right-padded to the longest.
struct SFTBatch {
  torch::Tensor tokens;          // int64 [B, T], pad_id after each row's end
  torch::Tensor attention_mask;  // bool  [B, T] false on padding
  torch::Tensor loss_mask;       // bool  [B, T] true on the assistant's tokens (never column 0)
};

SFTBatch collate(const SFTRows& rows, const std::vector<int64_t>& indices, int64_t pad_id,
                 torch::Device device = torch::kCPU);

}  // namespace turnrl
