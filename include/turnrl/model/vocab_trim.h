#pragma once
// Vocabulary trimming (domain vocabulary pruning): a byte-level BPE tokenizer folder cut down to
// the tokens a corpus needs, so that a small model's embedding and output projection cover only
// those rows. Qwen3's 151,669 x 128 projection is 19.4 M of qwen3-tiny's 20.2 M parameters and
// nearly all of a CPU step's time (docs/model.md, "Vocabulary trimming").
//
//   TrimmedVocabulary t = turnrl::trim_vocabulary(".deps/hf-tokenizers/qwen3", texts, "models/qwen3-code-tokenizer");
//   // then: turnrl init-model --tokenizer models/qwen3-code-tokenizer --preset qwen3-tiny
//
// The kept tokens K: the 256 byte-level alphabet tokens, every added (special) token, the model's
// unk_token if any, every token of the full tokenizer's encode() of each text (with and without
// special-token parsing) and every id of `keep_ids`; then closed under merges: for every kept token
// T, every merge (a, b) with a + b == T adds a and b, to a fixpoint. The merges kept are exactly
// those whose parts and result are all in K, in their original order. New ids are the kept
// tokens in the order of their old ids, dense from 0 (added tokens keep their order, after the
// vocabulary).
//
// Why the corpus tokenizes exactly as before: on a pre-tokenized piece of a corpus text, the full
// BPE applies a sequence of merges, each the lowest-ranked merge applicable to the current
// symbols (leftmost on ties). Every result it forms is a node of the merge tree of one of the
// piece's final tokens, so by the closure every merge it applies has its parts and result in K and
// is kept. At each step the trimmed BPE chooses the lowest-ranked applicable merge among a subset
// of the full one's merges, in the same relative order; the full one's choice is in that subset
// and is the minimum over the larger set, so it is the trimmed one's choice too. Both start from
// the same symbols (the byte alphabet is kept) and so apply the same merges. With ignore_merges
// (Llama-3) a piece that is a whole vocabulary token is that token, which encode() put in K; a
// piece that is none is not one in the trimmed vocabulary either. Added tokens are all kept and
// split the text as before; the normalizer and pre-tokenizer are unchanged.
// Any other text still tokenizes and decodes back exactly (every byte has its alphabet token),
// into more and shorter tokens than the full tokenizer would give it.
//
// Written files: tokenizer.json (model.vocab, model.merges in the file's own encoding, "a b" or
// [a, b]; added_tokens[].id; the post-processor's special-token ids, as in Llama-3's
// TemplateProcessing; padding.pad_id), tokenizer_config.json (added_tokens_decoder keys), and
// when present generation_config.json (bos/eos/pad/decoder_start token ids), added_tokens.json (ids),
// special_tokens_map.json and chat_template.jinja (copied: they name tokens by string). Tokens
// named by string (bos_token, eos_token, pad_token, the chat template) keep their names. The
// slow tokenizer's vocab.json / merges.txt and a model's config.json are not written.
#include <cstdint>
#include <string>
#include <vector>

namespace turnrl {

struct TrimmedVocabulary {
  int64_t full_vocab_size = 0;  // ids of the input tokenizer (vocabulary and added tokens)
  int64_t vocab_size = 0;       // ids written (kept tokens)
  int64_t full_merges = 0;
  int64_t merges = 0;           // merges written
  std::vector<int64_t> new_id_of_old;  // [full_vocab_size]: the written id of each input id, -1 when dropped
  // The re-encoding check over `texts`: each encoded by the written tokenizer, its tokens (as
  // strings) compared with the input tokenizer's.
  int64_t texts_checked = 0;
  int64_t texts_identical = 0;
};

// Reads the tokenizer folder `tokenizer_dir` (tokenizer.json of the byte-level BPE kind that
// BpeTokenizer reads, and tokenizer_config.json), keeps what `texts` and `keep_ids` (ids of the
// input tokenizer, e.g. a corpus already tokenized through a chat template whose text runs are
// not among `texts`) need, and writes the trimmed folder `out_dir` (created; files replaced), then
// checks it as TrimmedVocabulary says. Errors name the folder or file and the value: a missing
// folder or file, a tokenizer kind BpeTokenizer cannot read, a vocabulary without the 256 byte
// symbols, an id out of range, out_dir equal to tokenizer_dir.
TrimmedVocabulary trim_vocabulary(const std::string& tokenizer_dir, const std::vector<std::string>& texts,
                                  const std::string& out_dir, const std::vector<int64_t>& keep_ids = {});

}  // namespace turnrl
