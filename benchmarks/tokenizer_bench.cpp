// Byte-level BPE throughput on real text: encode and decode tokens/s of BpeTokenizer (priority-queue
// merges, word cache; the first pass over the corpus is reported apart as "cold") for the Qwen3 and
// Llama-3 tokenizer.json files, against the baseline measured in the same run: the same pre-tokenization followed by the naive merge loop (rescan the word for the
// lowest-ranked pair after every merge: tests/support/naive_bpe.h, also the tests' reference).
// The corpus is this repository's own sources and docs (code and prose, as a kernel policy sees).
//
//   tokenizer_bench [--quick]      (needs scripts/setup.sh's .deps/hf-tokenizers)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "naive_bpe.h"
#include "turnrl/model/bpe_tokenizer.h"

using namespace turnrl;

namespace {

std::vector<std::string> corpus_files(bool quick) {
  std::vector<std::string> texts;
  for (const char* folder : {"src", "docs", "include"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(TURNRL_SOURCE_DIR) + "/" + folder)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".md" && ext != ".cu")) continue;
      std::ifstream in(entry.path());
      std::ostringstream text;
      text << in.rdbuf();
      texts.push_back(text.str());
      if (quick && texts.size() >= 20) return texts;
    }
  }
  return texts;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  const std::vector<std::string> all_texts = corpus_files(args.quick);
  std::printf("%-8s %6s %8s %8s %10s %12s %12s %11s %7s %7s %12s\n", "model", "files", "KiB", "load", "cold tok/s",
              "encode tok/s", "naive tok/s", "encode MB/s", "ratio", "cold", "decode tok/s");
  for (const std::string name : {"qwen3", "llama3"}) {
    const std::string path = std::string(TURNRL_SOURCE_DIR) + "/.deps/hf-tokenizers/" + name + "/tokenizer.json";
    if (!std::ifstream(path).good()) {
      std::fprintf(stderr, "%s missing: run scripts/setup.sh\n", path.c_str());
      return 1;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const BpeTokenizer tok = BpeTokenizer::from_file(path);
    const double load = seconds_since(t0);
    const reference::NaiveBpe naive(path);
    // Added tokens (Qwen's <think>, <tool_call>) are split out before the merge loop, which the
    // naive baseline does not do: leave out the files that contain one.
    std::vector<std::string> texts;
    size_t bytes = 0;
    for (const std::string& t : all_texts) {
      const auto& added = tok.added_tokens();
      if (std::none_of(added.begin(), added.end(), [&](const AddedToken& a) { return t.find(a.content) != std::string::npos; }))
        texts.push_back(t), bytes += t.size();
    }

    std::vector<TokenIds> encoded(texts.size());
    size_t tokens = 0;
    // The first pass fills the word cache: its rate is what a tokenizer gets on unseen text.
    const auto cold_start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < texts.size(); ++i) tokens += (encoded[i] = tok.encode(texts[i])).size();
    const double cold = seconds_since(cold_start);
    const double encode = bench::median_seconds(
        [&] {
          tokens = 0;
          for (size_t i = 0; i < texts.size(); ++i) tokens += (encoded[i] = tok.encode(texts[i])).size();
        },
        torch::kCPU, 1.0, args.quick ? 3 : 10, 1);
    size_t naive_tokens = 0;
    const double naive_time = bench::median_seconds(
        [&] {
          naive_tokens = 0;
          for (const std::string& t : texts)
            for (const std::string& piece : tok.pre_tokenize(t)) naive_tokens += naive.encode_piece(piece).size();
        },
        torch::kCPU, 1.0, args.quick ? 3 : 5, 1);
    if (naive_tokens != tokens) {
      std::fprintf(stderr, "%s: naive baseline gave %zu tokens, encode %zu\n", name.c_str(), naive_tokens, tokens);
      return 1;
    }
    const double decode = bench::median_seconds(
        [&] {
          for (const TokenIds& ids : encoded) tok.decode(ids);
        },
        torch::kCPU, 0.5, args.quick ? 3 : 10, 1);
    std::printf("%-8s %6zu %8.1f %8s %10.0f %12.0f %12.0f %11.2f %6.1fx %6.1fx %12.0f\n", name.c_str(), texts.size(),
                double(bytes) / 1024, bench::human_time(load).c_str(), double(tokens) / cold, double(tokens) / encode,
                double(tokens) / naive_time, double(bytes) / encode / 1e6, naive_time / encode, naive_time / cold,
                double(tokens) / decode);
  }
  std::printf("\nratio: naive-rescan time / encode time (warm word cache), cold: the same for the first pass;\n"
              "same pre-tokenization, same ids (checked)\n");
  return 0;
}
