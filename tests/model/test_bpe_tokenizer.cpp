// Byte-level BPE (model/bpe_tokenizer.h) against the real Qwen3 and Llama-3 tokenizer.json files.
// Reference ids: transformers.js's port of HF `tokenizers` on a fixed corpus (the project's own
// sources and docs, Unicode, digits, whitespace, code, contractions, special tokens), written by
// scripts/dev/make_tokenizer_fixtures.mjs; benchmarks/device/check_tokenizers.py re-checks the
// same corpus against the real `tokenizers` library on a machine that has it.
#include <algorithm>
#include <array>
#include <map>
#include <thread>

#include <catch2/catch.hpp>

#include "naive_bpe.h"
#include "model/hf_tokenizer_files.h"
#include "turnrl/core/error.h"
#include "turnrl/model/bpe_tokenizer.h"

using namespace turnrl;
using nlohmann::json;

namespace {

const BpeTokenizer& real_tokenizer(const std::string& name) {
  static std::map<std::string, BpeTokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, BpeTokenizer::from_file(test::hf_tokenizer_dir(name) + "/tokenizer.json")).first;
  return it->second;
}

std::string show(const TokenIds& ids) {
  std::string s;
  for (const int64_t id : ids) s += std::to_string(id) + " ";
  return s;
}

// A small byte-level tokenizer.json: `pre_tokenizer` and `added_tokens` as given, a vocabulary of
// the letters a-d, '-' and some merges of them.
std::string tiny_tokenizer_json(const json& pre_tokenizer, const json& added_tokens = json::array(),
                                const json& model_overrides = json::object()) {
  json model = {{"type", "BPE"},
                {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}, {"-", 4}, {"ab", 5}, {"bc", 6}, {"abc", 7}, {"cd", 8}, {"Ġ", 9}}},
                {"merges", json::array({"b c", json::array({"a", "b"}), "a bc", "c d"})}};
  model.update(model_overrides);
  return json{{"version", "1.0"}, {"normalizer", nullptr}, {"pre_tokenizer", pre_tokenizer},
              {"decoder", {{"type", "ByteLevel"}}}, {"model", model}, {"added_tokens", added_tokens}}
      .dump();
}

json byte_level(bool use_regex = false) { return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", use_regex}}; }

json split_then_byte_level(const json& pattern, const std::string& behavior, bool invert = false) {
  return {{"type", "Sequence"},
          {"pretokenizers", json::array({json{{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}},
                                         byte_level()})}};
}

}  // namespace

TEST_CASE("bpe tokenizer: ids equal the reference on every line of the corpus, Qwen3 and Llama-3", "[model]") {
  const json fixture = test::tokenizer_fixture("encode_fixtures.json");
  REQUIRE(fixture.at("cases").size() > 250);
  for (const std::string name : {"qwen3", "llama3"}) {
    const BpeTokenizer& tok = real_tokenizer(name);
    size_t mismatches = 0;
    for (const json& c : fixture.at("cases")) {
      const std::string text = c.at("text");
      const TokenIds expected = c.at(name).get<TokenIds>();
      // The reference parses special-token names in the text (HF's default).
      const TokenIds got = tok.encode(text, /*parse_special=*/true);
      if (got != expected && ++mismatches <= 5) {
        INFO(name << " text: " << json(text).dump() << "\n expected " << show(expected) << "\n got      " << show(got));
        CHECK(got == expected);
      }
    }
    INFO(name);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("bpe tokenizer: decode(encode(x)) == x, NFC for Qwen's normalizer", "[model]") {
  const json fixture = test::tokenizer_fixture("encode_fixtures.json");
  const BpeTokenizer& qwen = real_tokenizer("qwen3");
  const BpeTokenizer& llama = real_tokenizer("llama3");
  for (const json& c : fixture.at("cases")) {
    const std::string text = c.at("text");
    INFO(json(text).dump());
    CHECK(llama.decode(llama.encode(text)) == text);
    CHECK(llama.decode(llama.encode(text, true)) == text);
    // Qwen normalizes to NFC, so the two decomposed lines come back composed (checked below).
    if (text.rfind("combining:", 0) != 0 && text.rfind("\xC3\x85 vs", 0) != 0) CHECK(qwen.decode(qwen.encode(text)) == text);
  }
  // Hand-composed: e+U+0301 -> U+00E9, a+U+0300 -> U+00E0, o+U+0308 -> U+00F6, n+U+0303 -> U+00F1;
  // A+U+030A and the Angstrom sign U+212B -> U+00C5.
  CHECK(qwen.decode(qwen.encode("combining: e\xCC\x81 a\xCC\x80 o\xCC\x88 n\xCC\x83 (NFD)")) ==
        "combining: \xC3\xA9 \xC3\xA0 \xC3\xB6 \xC3\xB1 (NFD)");
  CHECK(qwen.decode(qwen.encode("\xC3\x85 vs A\xCC\x8A vs \xE2\x84\xAB (angstrom)")) ==
        "\xC3\x85 vs \xC3\x85 vs \xC3\x85 (angstrom)");
  CHECK(llama.encode("A\xCC\x8A") != llama.encode("\xC3\x85"));  // Llama-3 has no normalizer
}

TEST_CASE("bpe tokenizer: the priority-queue merge loop equals a naive lowest-rank rescan", "[model]") {
  const json fixture = test::tokenizer_fixture("encode_fixtures.json");
  for (const std::string name : {"qwen3", "llama3"}) {
    const BpeTokenizer& tok = real_tokenizer(name);
    const reference::NaiveBpe naive(test::hf_tokenizer_dir(name) + "/tokenizer.json");
    for (const json& c : fixture.at("cases")) {
      const std::string text = c.at("text");
      const auto& added = tok.added_tokens();
      if (std::any_of(added.begin(), added.end(), [&](const AddedToken& t) { return text.find(t.content) != std::string::npos; }))
        continue;  // added tokens are not the merge loop's
      TokenIds expected;
      for (const std::string& piece : tok.pre_tokenize(text)) {
        const auto ids = naive.encode_piece(piece);
        expected.insert(expected.end(), ids.begin(), ids.end());
      }
      INFO(name << ": " << json(text).dump());
      CHECK(tok.encode(text) == expected);
    }
  }
}

TEST_CASE("bpe tokenizer: threads encoding at once (sharing the word cache) get the single-threaded ids", "[model]") {
  const json fixture = test::tokenizer_fixture("encode_fixtures.json");
  const BpeTokenizer tok = BpeTokenizer::from_file(test::hf_tokenizer_dir("qwen3") + "/tokenizer.json");  // cold cache
  std::vector<std::string> texts;
  std::vector<TokenIds> expected;
  for (const json& c : fixture.at("cases")) {
    texts.push_back(c.at("text"));
    expected.push_back(c.at("qwen3").get<TokenIds>());
  }
  std::vector<std::vector<TokenIds>> got(4, std::vector<TokenIds>(texts.size()));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < texts.size(); ++i) got[t][i] = tok.encode(texts[i], true);
    });
  for (std::thread& thread : threads) thread.join();
  for (const auto& per_thread : got) CHECK(per_thread == expected);
}

TEST_CASE("bpe tokenizer: the pre-tokenizer regexes split digits, contractions and whitespace as each model does", "[model]") {
  const BpeTokenizer& qwen = real_tokenizer("qwen3");
  const BpeTokenizer& llama = real_tokenizer("llama3");
  using V = std::vector<std::string>;
  // Qwen: one digit per piece; Llama-3: groups of up to three.
  CHECK(qwen.pre_tokenize("12345") == V{"1", "2", "3", "4", "5"});
  CHECK(llama.pre_tokenize("1234567") == V{"123", "456", "7"});
  // Contractions, case-insensitive; 'Ġ' is the byte-level symbol of the space.
  CHECK(llama.pre_tokenize("IT'S we'LL") == V{"IT", "'S", "\xC4\xA0we", "'LL"});
  // A run of spaces keeps its last space for the next word; newlines go alone.
  CHECK(qwen.pre_tokenize("a   b\n\nc") == V{"a", "\xC4\xA0\xC4\xA0", "\xC4\xA0" "b", "\xC4\x8A\xC4\x8A", "c"});
}

TEST_CASE("bpe tokenizer: special tokens are parsed only on request, non-special added tokens always", "[model]") {
  const BpeTokenizer& qwen = real_tokenizer("qwen3");
  const int64_t im_end = qwen.token_to_id("<|im_end|>").value();
  const int64_t think = qwen.token_to_id("<think>").value();
  CHECK(im_end == 151645);
  CHECK(think == 151667);
  CHECK(qwen.is_special(im_end));
  CHECK_FALSE(qwen.is_special(think));

  const std::string text = "a<|im_end|>b<think>c";
  const TokenIds parsed = qwen.encode(text, true);
  const TokenIds plain = qwen.encode(text, false);
  CHECK(std::count(parsed.begin(), parsed.end(), im_end) == 1);
  CHECK(std::count(plain.begin(), plain.end(), im_end) == 0);  // user text cannot inject a turn end
  CHECK(std::count(plain.begin(), plain.end(), think) == 1);   // as HF with split_special_tokens=True
  CHECK(qwen.decode(plain) == text);
  CHECK(qwen.decode(parsed) == text);
  CHECK(qwen.decode(parsed, /*skip_special_tokens=*/true) == "ab<think>c");
  CHECK(qwen.vocab_size() == 151669);
  CHECK(real_tokenizer("llama3").vocab_size() == 128256);
}

TEST_CASE("bpe tokenizer: decode replaces broken UTF-8 as HF does and skips ids past the tokenizer", "[model]") {
  const BpeTokenizer& qwen = real_tokenizer("qwen3");
  // "é" is one token in Qwen; its two bytes are the byte tokens of 0xC3 and 0xA9.
  const int64_t c3 = qwen.token_to_id("\xC3\x83").value();  // byte 0xC3's symbol U+00C3
  CHECK(qwen.decode({c3}) == "\xEF\xBF\xBD");
  CHECK(qwen.decode({c3, qwen.encode("a").at(0)}) == "\xEF\xBF\xBD" "a");
  // Qwen3's embedding has 151,936 rows; ids past the tokenizer's 151,669 name no token.
  CHECK(qwen.decode({qwen.encode("a").at(0), 151800}) == "a");
  CHECK_THROWS_WITH(qwen.decode({-1}), Catch::Contains("negative id -1"));
  CHECK_THROWS_WITH(qwen.encode("bad \xFF byte"), Catch::Contains("not valid UTF-8") && Catch::Contains("offset 4"));
}

TEST_CASE("bpe tokenizer: decode replaces each maximal ill-formed UTF-8 subpart with one U+FFFD", "[model]") {
  const BpeTokenizer& llama = real_tokenizer("llama3");
  // GPT-2's byte symbols, written out here: printable Latin-1 bytes are themselves, the other 68
  // bytes take U+0100.. in byte order; one token per byte.
  std::array<int, 256> code{};
  for (int b = 0, next = 0x100; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    code[size_t(b)] = printable ? b : next++;
  }
  const auto byte_ids = [&](const std::string& bytes) {
    TokenIds ids;
    for (const char ch : bytes) {
      const int c = code[static_cast<unsigned char>(ch)];  // below U+0144: one or two UTF-8 bytes
      const std::string symbol = c < 0x80 ? std::string(1, char(c)) : std::string{char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
      ids.push_back(llama.token_to_id(symbol).value());
    }
    return ids;
  };
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(llama.decode(byte_ids("a\xC3\xA9z")) == "a\xC3\xA9z");         // well-formed
  CHECK(llama.decode(byte_ids("a\xC3")) == "a" + fffd);                 // truncated 2-byte
  CHECK(llama.decode(byte_ids("\xF0\x9F\x99!")) == fffd + "!");         // truncated 4-byte: one subpart
  CHECK(llama.decode(byte_ids("\xE0\x80\x80")) == fffd + fffd + fffd);  // overlong: three
  CHECK(llama.decode(byte_ids("\xED\xA0\x80")) == fffd + fffd + fffd);  // surrogate: three
  CHECK(llama.decode(byte_ids("\xFF\x80 ")) == fffd + fffd + " ");      // bytes that start nothing
  CHECK(llama.decode(byte_ids("\n\t ")) == "\n\t ");
}

TEST_CASE("bpe tokenizer: merges apply lowest rank first, in both merge formats", "[model]") {
  const BpeTokenizer tok = BpeTokenizer::from_json(tiny_tokenizer_json(byte_level()));
  // "abc": "b c" (rank 0) before "a b" (rank 1), then "a bc" (rank 2) -> abc.
  CHECK(tok.encode("abc") == TokenIds{7});
  // "abcd": b c, then a bc -> abc, d; "c d" never applies since c was merged first.
  CHECK(tok.encode("abcd") == TokenIds{7, 3});
  CHECK(tok.encode("cd") == TokenIds{8});
  CHECK(tok.encode("ab") == TokenIds{5});
  CHECK(tok.encode("dab") == TokenIds{3, 5});
  CHECK(tok.decode({7, 3}) == "abcd");
}

TEST_CASE("bpe tokenizer: ignore_merges takes a piece found in the vocabulary whole", "[model]") {
  // "ab" merges into 5 either way; a vocabulary entry that merges cannot reach shows the difference.
  json model = {{"ignore_merges", true}, {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}, {"-", 4}, {"ab", 5}, {"bc", 6}, {"abc", 7}, {"cd", 8}, {"Ġ", 9}, {"bcd", 10}}}};
  const BpeTokenizer with = BpeTokenizer::from_json(tiny_tokenizer_json(byte_level(), json::array(), model));
  model["ignore_merges"] = false;
  const BpeTokenizer without = BpeTokenizer::from_json(tiny_tokenizer_json(byte_level(), json::array(), model));
  CHECK(with.encode("bcd") == TokenIds{10});
  CHECK(without.encode("bcd") == TokenIds{6, 3});
}

TEST_CASE("bpe tokenizer: every Split behavior, and invert", "[model]") {
  using V = std::vector<std::string>;
  const auto pieces = [&](const std::string& behavior, bool invert = false, const json& pattern = json{{"String", "-"}}) {
    return BpeTokenizer::from_json(tiny_tokenizer_json(split_then_byte_level(pattern, behavior, invert))).pre_tokenize("a-b--c");
  };
  CHECK(pieces("Isolated") == V{"a", "-", "b", "-", "-", "c"});
  CHECK(pieces("Removed") == V{"a", "b", "c"});
  CHECK(pieces("MergedWithPrevious") == V{"a-", "b-", "-", "c"});
  CHECK(pieces("MergedWithNext") == V{"a", "-b", "-", "-c"});
  CHECK(pieces("Contiguous") == V{"a", "-", "b", "--", "c"});
  // invert: the regex names what is kept; Removed then drops the dashes between the matches.
  CHECK(pieces("Removed", true, json{{"Regex", "[a-z]+"}}) == V{"a", "b", "c"});
  CHECK(pieces("Removed", false, json{{"Regex", "[a-z]+"}}) == V{"-", "--"});
}

TEST_CASE("bpe tokenizer: added tokens honour lstrip, rstrip and single_word", "[model]") {
  const auto added = [](bool lstrip, bool rstrip, bool single_word) {
    return json::array({json{{"id", 20}, {"content", "<x>"}, {"special", true}, {"normalized", false},
                             {"lstrip", lstrip}, {"rstrip", rstrip}, {"single_word", single_word}}});
  };
  const json pre = byte_level(true);
  const int64_t space = 9;  // "Ġ"
  const BpeTokenizer plain = BpeTokenizer::from_json(tiny_tokenizer_json(pre, added(false, false, false)));
  const BpeTokenizer left = BpeTokenizer::from_json(tiny_tokenizer_json(pre, added(true, false, false)));
  const BpeTokenizer right = BpeTokenizer::from_json(tiny_tokenizer_json(pre, added(false, true, false)));
  const BpeTokenizer word = BpeTokenizer::from_json(tiny_tokenizer_json(pre, added(false, false, true)));
  CHECK(plain.encode("a <x> b", true) == TokenIds{0, space, 20, space, 1});
  CHECK(left.encode("a <x> b", true) == TokenIds{0, 20, space, 1});
  CHECK(right.encode("a <x> b", true) == TokenIds{0, space, 20, 1});
  // Inside a word the single_word token is plain text ('<', 'x', '>' are not in this vocabulary,
  // so the characters would fail to encode: check the split through pre_tokenize-free decode).
  CHECK(word.encode("a <x> b", true) == TokenIds{0, space, 20, space, 1});
  CHECK_THROWS_WITH(word.encode("a<x>b", true), Catch::Contains("not in the vocabulary"));
  CHECK(plain.decode({0, 20, 1}) == "a<x>b");
  CHECK(plain.decode({0, 20, 1}, true) == "ab");
}

TEST_CASE("bpe tokenizer: unsupported or malformed files are errors naming the JSON path and the value", "[model]") {
  const auto error_of = [](const std::string& text) {
    try {
      BpeTokenizer::from_json(text, "tok.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const json pre = byte_level();
  json doc = json::parse(tiny_tokenizer_json(pre));

  CHECK_THAT(error_of("{\"model\": "), Catch::Contains("tok.json: not valid JSON"));
  for (const char* type : {"Unigram", "WordPiece", "WordLevel"}) {
    json d = doc;
    d["model"]["type"] = type;
    CHECK_THAT(error_of(d.dump()), Catch::Contains("tok.json: model.type: model type '" + std::string(type) + "' is not supported") &&
                                       Catch::Contains("BPE"));
  }
  json d = doc;
  d["model"].erase("merges");
  CHECK_THAT(error_of(d.dump()), Catch::Contains("tok.json: model: missing 'merges'"));
  d = doc;
  d["model"]["byte_fallback"] = true;
  CHECK_THAT(error_of(d.dump()), Catch::Contains("model.byte_fallback: true is not supported"));
  d = doc;
  d["model"]["merges"].push_back("a zz");
  CHECK_THAT(error_of(d.dump()), Catch::Contains("model.merges[4]: token 'zz' of the merge is not in the vocabulary"));
  d = doc;
  d["model"]["merges"].push_back("abc");
  CHECK_THAT(error_of(d.dump()), Catch::Contains("model.merges[4]: merge 'abc' is not two tokens"));
  d = doc;
  d["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({byte_level(), json{{"type", "Metaspace"}}})}};
  CHECK_THAT(error_of(d.dump()), Catch::Contains("pre_tokenizer.pretokenizers[1].type: pre-tokenizer 'Metaspace' is not supported"));
  d = doc;
  d["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
  CHECK_THAT(error_of(d.dump()), Catch::Contains("pre_tokenizer: no ByteLevel step"));
  d = doc;
  d["pre_tokenizer"] = split_then_byte_level(json{{"Regex", "(unclosed"}}, "Isolated");
  CHECK_THAT(error_of(d.dump()), Catch::Contains("pre_tokenizer.pretokenizers[0].pattern.Regex: regex '(unclosed' does not compile"));
  d = doc;
  d["pre_tokenizer"] = split_then_byte_level(json{{"Regex", "x"}}, "Sideways");
  CHECK_THAT(error_of(d.dump()), Catch::Contains("split behavior 'Sideways' is not one of Isolated"));
  d = doc;
  d["normalizer"] = {{"type", "Lowercase"}};
  CHECK_THAT(error_of(d.dump()), Catch::Contains("tok.json: normalizer.type: normalizer 'Lowercase' is not supported"));
  d = doc;
  d["decoder"] = {{"type", "Metaspace"}};
  CHECK_THAT(error_of(d.dump()), Catch::Contains("decoder.type: decoder 'Metaspace' is not supported"));
  d = doc;
  d.erase("decoder");
  CHECK_THAT(error_of(d.dump()), Catch::Contains("tok.json: decoder: no decoder"));
  d = doc;
  d["added_tokens"] = json::array({json{{"id", "7"}, {"content", "<y>"}}});
  CHECK_THAT(error_of(d.dump()), Catch::Contains("added_tokens[0].id: expected an integer, found \"7\""));
  CHECK_THROWS_WITH(BpeTokenizer::from_file("/nonexistent/tokenizer.json"), Catch::Contains("/nonexistent/tokenizer.json: cannot open"));
}
